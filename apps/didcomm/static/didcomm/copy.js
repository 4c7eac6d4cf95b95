// The admin's "Copy" buttons (the DIDComm invitation URL on a tenant's page). A file of its own,
// not onclick="…": the staff pages' Content-Security-Policy allows no inline script
// (apps/ops/middleware.py). A button names the element whose text it copies in data-copy-target.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy-target]");
  if (!button) return;
  event.preventDefault();
  const source = document.getElementById(button.dataset.copyTarget);
  if (!source) return;
  const text = "value" in source ? source.value : source.textContent;
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // No Clipboard API (an insecure origin): select the text so that the operator copies it.
    if (source.select) source.select();
    return;
  }
  button.dataset.copied = "true";
  button.textContent = "Copied";
});
