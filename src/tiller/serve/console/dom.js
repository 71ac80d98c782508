// A tiny helper to build DOM nodes. Text always goes in through `textContent` (text nodes),
// never `innerHTML`: everything the console shows may come from a model, and model output is
// untrusted. Renderers (the tools.js registry) build nodes from a model's arguments, so `h`
// also refuses what would run them as code: an `on*` prop that is not a function (as an
// attribute it is a script), and a URL prop whose scheme is not http(s) or mailto
// (`javascript:`, `data:`, ...); relative URLs are kept.

/**
 * `h("button", {type: "button", testid: "send", onclick: fn}, "Send")`.
 * Props: `class`, `testid` (-> data-testid), `dataset` (object), `on<event>` handlers,
 * `hidden`/`checked`/`disabled`/`value`/`open` as properties, anything else as an attribute.
 * Dropped: an `on*` prop that is not a function; `href`/`src` (and the other URL props)
 * that are not http(s), mailto or relative.
 * Children: nodes, strings (as text), arrays of those; null/undefined/false are skipped.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "testid") el.dataset.testid = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (/^on/i.test(key)) {
      if (typeof value === "function") el.addEventListener(key.slice(2), value);
    } else if (URL_PROPS.has(key.toLowerCase()) && !isSafeUrl(String(value))) continue;
    else if (["hidden", "checked", "disabled", "value", "open", "required"].includes(key)) {
      el[key] = value;
    } else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

/** Props holding a URL the browser may navigate to or load. */
const URL_PROPS = new Set(["href", "src", "action", "formaction", "xlink:href"]);
const SAFE_SCHEMES = new Set(["http", "https", "mailto"]);

/**
 * Whether `url` is http(s), mailto or relative. The scheme is read as a browser reads it:
 * with ASCII whitespace and control characters removed (`java\tscript:` is `javascript:`)
 * and in any case.
 */
function isSafeUrl(url) {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url.replace(/[\u0000-\u0020\u007f]/g, ""));
  return scheme === null || SAFE_SCHEMES.has(scheme[1].toLowerCase());
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.append(child);
    else el.append(document.createTextNode(String(child)));
  }
}

/** Set an element's text only when it changed, so a redraw does not disturb a selection. */
export function setText(el, text) {
  const value = text ?? "";
  if (el.textContent !== value) el.textContent = value;
}

/** Put `wanted` (in order) as the children of `parent`, moving rather than recreating. */
export function placeChildren(parent, wanted) {
  wanted.forEach((child, index) => {
    const current = parent.children[index];
    if (current !== child) parent.insertBefore(child, current ?? null);
  });
  while (parent.children.length > wanted.length) parent.lastElementChild.remove();
}
