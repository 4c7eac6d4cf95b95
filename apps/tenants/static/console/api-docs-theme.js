// Swagger UI and Redoc follow the console's theme (unfold keeps the choice in localStorage
// "adminTheme": "light", "dark" or "auto"; auto or unset follows the system's colour scheme): the
// page gets html.dark, which api-docs.css styles. Loaded in <head>, before the page is drawn.
(function () {
  let theme = "auto";
  try { theme = JSON.parse(localStorage.getItem("adminTheme") || '"auto"'); } catch (e) { /* keep auto */ }
  const dark = theme === "dark" || (theme !== "light" && window.matchMedia("(prefers-color-scheme: dark)").matches);
  document.documentElement.classList.toggle("dark", dark);
})();
