"""The operator API's token authentication: `Authorization: Token <key>`, checked against the
stored digest (models.ApiToken), never against a stored key."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from .models import ApiToken


class ApiTokenAuthentication(TokenAuthentication):
    """DRF's token header and errors, with the key looked up by its SHA-256 digest."""

    model = ApiToken

    def authenticate_credentials(self, key: str):
        token = ApiToken.objects.select_related("user").filter(digest=ApiToken.digest_of(key)).first()
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return token.user, token
