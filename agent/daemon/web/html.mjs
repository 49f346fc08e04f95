// The `html` tagged template: every page's markup is written with it, and
// every ${value} in it is escaped unless it is itself markup made by `html`
// (a nested template, or an array of them). A forgotten escape cannot
// happen: a string is always text. `raw()` marks a string as markup; the
// pages use none (tests/web/unit/lint_test.mjs counts them).

// Markup: a string known to be safe to put in an element or a quoted
// attribute. Only `html` and `raw` make one.
// Joining two with `+` would make a string (text, escaped again where it is
// put), so that throws: put both in one template, or use join().
export class Html {
  constructor(text) { this.text = text; }
  toString() { throw new TypeError('markup made by html is joined by html or join(), not +'); }
}

const ENTITIES = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'};

// Text as markup: safe between tags and inside "..." or '...' attributes.
export function escape(value) {
  return String(value).replace(/[&<>"']/g, c => ENTITIES[c]);
}

// One interpolated value: markup as it is, arrays joined, null, undefined
// and false as nothing (so `${cond && html`...`}` works), the rest escaped.
function piece(value) {
  if (value instanceof Html) return value.text;
  if (Array.isArray(value)) return value.map(piece).join('');
  if (value == null || value === false) return '';
  return escape(value);
}

export function html(strings, ...values) {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += piece(values[i]) + strings[i + 1];
  return new Html(out);
}

// The escape hatch: a string that is markup already. Every use is a place
// where an unescaped value could reach the page.
export function raw(markup) {
  return new Html(String(markup));
}

// Items (markup or text) with a separator between them, as markup.
export function join(items, separator = '') {
  const sep = piece(separator);
  return new Html(items.map(piece).join(sep));
}
