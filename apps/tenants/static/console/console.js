// Console helpers, loaded on every console page (UNFOLD["SCRIPTS"]); a static file so that a
// Content-Security-Policy without 'unsafe-inline' can allow it.
// - [data-copy] buttons copy their value (a full DID) to the clipboard.
// - forms marked data-autosubmit submit when one of their selects changes.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const value = button.getAttribute("data-copy");
  const done = () => {
    button.classList.add("copied");
    button.setAttribute("title", "Copied");
    setTimeout(() => { button.classList.remove("copied"); button.setAttribute("title", "Copy the full DID"); }, 1500);
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(value).then(done);
  } else {
    const area = document.createElement("textarea");
    area.value = value;
    area.setAttribute("readonly", "");
    area.className = "copy-buffer";
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    area.remove();
    done();
  }
});
document.addEventListener("change", (event) => {
  const form = event.target.closest("form[data-autosubmit]");
  if (form && event.target.tagName === "SELECT") form.submit();
});
