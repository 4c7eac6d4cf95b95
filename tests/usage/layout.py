"""Layout checks for the usage pages in Chromium (bounding boxes, not pixels)."""

# Layout problems of a usage page, in words (an empty list when there is none): the page scrolls
# sideways; a chart's text leaves its chart or overlaps another text of the chart; a legend name
# or tick label is cut, leaves its card, overlaps another or is drawn too small to read; two tables overlap; a table hides
# columns outside a box that does not scroll (at `whole_tables`, every column is in view).
LAYOUT_PROBLEMS = """([wholeTables]) => {
  const problems = [];
  const root = document.scrollingElement;
  if (root.scrollWidth > root.clientWidth + 1) problems.push(`the page scrolls sideways: ${root.scrollWidth} > ${root.clientWidth} px`);
  const box = (e) => e.getBoundingClientRect();
  const overlap = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  for (const fig of document.querySelectorAll("figure.chart-card")) {
    const svg = fig.querySelector("svg.usage-chart");
    const frame = box(svg);
    if (box(fig).right > root.clientWidth + 0.5) problems.push(`${fig.id} is wider than the page`);
    const texts = [...svg.querySelectorAll("text")];
    for (const t of texts) {
      const r = box(t);
      if (r.left < frame.left - 0.5 || r.right > frame.right + 0.5 || r.top < frame.top - 0.5 || r.bottom > frame.bottom + 0.5)
        problems.push(`${fig.id}: "${t.textContent}" leaves its chart`);
      if (t.textContent.includes("\u2026")) problems.push(`${fig.id}: "${t.textContent}" is cut with an ellipsis`);
      if (r.height < 9) problems.push(`${fig.id}: "${t.textContent}" is drawn ${r.height.toFixed(1)} px high, too small to read`);
    }
    for (let i = 0; i < texts.length; i++)
      for (let j = i + 1; j < texts.length; j++)
        if (overlap(box(texts[i]), box(texts[j]))) problems.push(`${fig.id}: "${texts[i].textContent}" overlaps "${texts[j].textContent}"`);
    // The legend: every name whole, inside its card, apart from the others, readable.
    const items = [...fig.querySelectorAll("ul.chart-legend li")];
    const card = box(fig);
    for (const li of items) {
      const r = box(li);
      if (r.left < card.left - 0.5 || r.right > card.right + 0.5) problems.push(`${fig.id}: legend "${li.textContent}" leaves its card`);
      if (li.scrollWidth > li.clientWidth + 1 || li.textContent.includes("\u2026")) problems.push(`${fig.id}: legend "${li.textContent}" is cut`);
      if (parseFloat(getComputedStyle(li).fontSize) < 11) problems.push(`${fig.id}: legend "${li.textContent}" is too small to read`);
    }
    for (let i = 0; i < items.length; i++)
      for (let j = i + 1; j < items.length; j++)
        if (overlap(box(items[i]), box(items[j]))) problems.push(`${fig.id}: legend "${items[i].textContent}" overlaps "${items[j].textContent}"`);
    if (items.length && box(items[0]).top < frame.bottom - 0.5) problems.push(`${fig.id}: the legend overlaps the plot`);
  }
  const sections = [...document.querySelectorAll(".usage table.data")];
  for (let i = 0; i < sections.length; i++)
    for (let j = i + 1; j < sections.length; j++)
      if (overlap(box(sections[i]), box(sections[j]))) problems.push(`table ${i} overlaps table ${j}`);
  for (const table of sections) {
    const scroller = table.closest(".scroll");
    const name = (table.closest("[id]") || {}).id || table.id;
    const view = box(scroller || table.parentElement);
    const scrolls = scroller && getComputedStyle(scroller).overflowX === "auto" && scroller.scrollWidth > scroller.clientWidth;
    if (box(table).right > view.right + 0.5 && !scrolls) problems.push(`${name}: columns beyond the edge and no scrolling`);
    if (wholeTables && box(table).right > view.right + 0.5) problems.push(`${name}: not every column is in view (${box(table).width.toFixed(0)} px in ${view.width.toFixed(0)} px)`);
    for (const cell of table.querySelectorAll("th, td")) {
      if (cell.closest(".did")) continue;  // the short DID with its copy button is the console's on purpose
      if (cell.scrollWidth > cell.clientWidth + 1 && getComputedStyle(cell).overflow !== "visible") problems.push(`${name}: "${cell.textContent}" is cut`);
      if (cell.textContent.includes("\u2026")) problems.push(`${name}: "${cell.textContent}" is cut with an ellipsis`);
    }
  }
  for (const id of ["by-type", "by-code"]) {
    const a = document.getElementById(id);
    if (a) for (const other of document.querySelectorAll(".usage h2, .usage .scroll, .usage .chart-grid"))
      if (!a.contains(other) && !other.contains(a) && overlap(box(a), box(other))) problems.push(`#${id} overlaps ${other.tagName} "${other.textContent.slice(0, 30)}"`);
  }
  return problems;
}"""
