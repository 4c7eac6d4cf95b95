// The dashboard's filters submit on change. A file of its own, not onchange="…": the staff
// pages' Content-Security-Policy allows no inline script (apps/ops/middleware.py).
document.addEventListener("change", (event) => {
  if (event.target.matches("select[data-autosubmit]")) event.target.form.submit();
});
