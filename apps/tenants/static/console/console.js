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
// Scroll hints: a box whose content overflows it (the sidebar's list, a wide table on a phone) fades
// the edge it has more content behind (data-more="left right up down" for console.css), so it shows
// that it scrolls. The sidebar scrolls inside SimpleBar's wrapper; every other box scrolls itself.
const SCROLL_BOXES = "[data-scroll-hint], .usage .scroll, .live-connections-wrap, .overflow-x-auto";
function scrollHint(box) {
  const s = box.querySelector(":scope > .simplebar-wrapper .simplebar-content-wrapper") || box;
  const more = [];
  if (s.scrollLeft > 1) more.push("left");
  if (s.scrollWidth - s.clientWidth - s.scrollLeft > 1) more.push("right");
  if (s.scrollTop > 1) more.push("up");
  if (s.scrollHeight - s.clientHeight - s.scrollTop > 1) more.push("down");
  if (more.length) box.setAttribute("data-more", more.join(" "));
  else box.removeAttribute("data-more");
}
function scrollHints() { document.querySelectorAll(SCROLL_BOXES).forEach(scrollHint); }
window.consoleScrollHints = scrollHints;
document.addEventListener("scroll", (event) => {
  const box = event.target instanceof Element && event.target.closest(SCROLL_BOXES);
  if (box) scrollHint(box);
}, true);
window.addEventListener("resize", scrollHints);
window.addEventListener("load", scrollHints);
if (document.readyState !== "loading") scrollHints();
else document.addEventListener("DOMContentLoaded", scrollHints);
