"""The DIDComm invitations (OOB 2.0 and Aries OOB 1.1) on a tenant's page, in headless Chromium on a real Daphne under the
admin's Content-Security-Policy: the QR code the browser shows decodes (zxing-cpp, a reader
nobody here wrote) to the invitation URL the service gives, and Copy puts that URL on the
clipboard (apps/didcomm/static/didcomm/copy.js; no inline script)."""

from __future__ import annotations

import base64

import httpx
import pytest
import zxingcpp

from tests.support.browser import ARTIFACTS, admin_page
from tests.support.csp_marker import reported
from tests.support.csp_marker import violations as csp_violations

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

# The screenshot of the QR as the page shows it, drawn on a canvas and read back as grey levels.
PIXELS = """async (png) => {
  const img = new Image();
  img.src = "data:image/png;base64," + png;
  await img.decode();
  const canvas = document.createElement("canvas");
  canvas.width = img.width;
  canvas.height = img.height;
  const ctx = canvas.getContext("2d");
  ctx.drawImage(img, 0, 0);
  const rgba = ctx.getImageData(0, 0, img.width, img.height).data;
  const grey = new Array(img.width * img.height);
  for (let i = 0; i < grey.length; i++) grey[i] = Math.round((rgba[4 * i] + rgba[4 * i + 1] + rgba[4 * i + 2]) / 3);
  return {width: img.width, height: img.height, grey};
}"""


def test_the_invitation_qr_decodes_to_the_invitation_url_and_copy_puts_it_on_the_clipboard(daphne, django_user_model):
    from apps.tenants.services import tenant_create

    tenant = tenant_create(slug="qr-tenant", domain="qr.mediator.test", name="QR tenant")
    url = httpx.get(f"{daphne.url}/didcomm/invitation?form=url", headers={"Host": tenant.domain}, timeout=10).text
    assert url.startswith("http://qr.mediator.test/didcomm?_oob=") and len(url) > 600
    url_v1 = httpx.get(
        f"{daphne.url}/didcomm/invitation?version=1&form=url", headers={"Host": tenant.domain}, timeout=10
    ).text
    assert url_v1.startswith("http://qr.mediator.test/didcomm?oob=")
    django_user_model.objects.create_superuser("olivia", "olivia@ops.test", "correct-horse-battery")

    with admin_page(daphne.url, "olivia", "correct-horse-battery") as page:
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=daphne.url)
        violations = csp_violations(page)
        page.goto(f"{daphne.url}/admin/tenants/tenant/{tenant.pk}/change/")
        # OOB 2.0 (DIDComm v2) and Aries OOB 1.1 (DIDComm v1: ACA-Py, Credo), each with its QR and Copy
        for dom_id, expected in (("didcomm-oob", url), ("didcomm-oob-v1", url_v1)):
            qr = page.locator(f"#{dom_id}-qr svg")
            qr.evaluate("e => e.scrollIntoView({block: 'center'})")  # clear of the sticky (blurred) save bar
            shot = qr.screenshot(path=str(ARTIFACTS / f"{dom_id}-invitation-qr.png"))
            image = page.evaluate(PIXELS, base64.b64encode(shot).decode())
            pixels = memoryview(bytes(image["grey"])).cast("B", (image["height"], image["width"]))
            decoded = zxingcpp.read_barcodes(pixels, formats=zxingcpp.BarcodeFormat.QRCode)
            assert [(b.format, b.text) for b in decoded] == [(zxingcpp.BarcodeFormat.QRCode, expected)]

            assert page.input_value(f"#{dom_id}-url") == expected
            button = page.locator(f"button[data-copy-target={dom_id}-url]")
            button.click()
            page.wait_for_function(
                f"document.querySelector('button[data-copy-target={dom_id}-url]').dataset.copied === 'true'"
            )
            assert button.inner_text() == "Copied"
            assert page.evaluate("navigator.clipboard.readText()") == expected
        assert reported(page, violations) == []
