"""Django's date formats for the console and dashboard (FORMAT_MODULE_PATH): the one time format of
apps/wire/display.py, so lists, forms and the audit log show `2026-11-23T08:36:12Z`, never a locale's."""

from apps.wire.display import DJANGO_DATE_FORMAT, DJANGO_UTC_FORMAT

DATETIME_FORMAT = DJANGO_UTC_FORMAT
SHORT_DATETIME_FORMAT = DJANGO_UTC_FORMAT
DATE_FORMAT = DJANGO_DATE_FORMAT
SHORT_DATE_FORMAT = DJANGO_DATE_FORMAT
TIME_FORMAT = r"H:i:s\Z"
DATE_INPUT_FORMATS = ["%Y-%m-%d"]
DATETIME_INPUT_FORMATS = ["%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"]
