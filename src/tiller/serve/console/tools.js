// Tool renderers: how the console draws one tool's call and result, keyed by tool name.
//
// After CopilotKit's `useCopilotAction({name, render})`: an app that knows its tools can
// show a `book_trip` call as a booking card instead of raw JSON. A renderer is an object
// with any of these functions, each given one `view` of the call:
//
//   render(view)   -> a Node or a string: drawn in place of the arguments and the result
//   describe(view) -> a string: what the call would do, in plain words, for the approval
//                     card ("Book a trip to Lisbon on 3 May")
//
// `view` is {name, args (the parsed arguments, or null while they stream or if they are
// not JSON), argsText, status ("running" | "done" | "error" | "held" | "stopped"), result
// (the result's text, or null), progress ({output, status, fraction} or null), h}. `h` is
// the console's DOM helper (dom.js): it puts every string in as text, never as HTML.
//
// Register one from a script the server includes (`tiller serve --console-script FILE`,
// `AppSettings(console_scripts=[...])`), which the page imports once it has started:
//
//   window.tillerConsole.registerToolRenderer("book_trip", {
//     describe: ({ args }) => `Book a trip to ${args?.city ?? "somewhere"}`,
//     render: ({ args, result, h }) => h("div", {}, "Trip to ", h("b", {}, args?.city)),
//   });
//
// Everything a renderer is given may come from a model: it is untrusted. A string returned
// is shown as text; a renderer that builds nodes must keep it that way (`h`, textContent),
// never `innerHTML`.

import { h } from "./dom.js";

const renderers = new Map();

/** Listeners told when a renderer is registered (the view redraws the calls it affects). */
const listeners = new Set();

export function registerToolRenderer(name, renderer) {
  if (typeof name !== "string" || !name) {
    throw new TypeError("registerToolRenderer(name, renderer): name must be the tool's name");
  }
  if (renderer === null || typeof renderer !== "object") {
    throw new TypeError(
      `registerToolRenderer(${JSON.stringify(name)}, renderer): renderer must be an object ` +
        "with render(view) and/or describe(view)",
    );
  }
  for (const key of ["render", "describe"]) {
    if (renderer[key] !== undefined && typeof renderer[key] !== "function") {
      throw new TypeError(`the renderer of ${JSON.stringify(name)}: ${key} must be a function`);
    }
  }
  renderers.set(name, renderer);
  for (const listener of listeners) listener(name);
}

export function toolRenderer(name) {
  return renderers.get(name);
}

export function onToolRendererRegistered(listener) {
  listeners.add(listener);
}

/** The arguments as an object, or null (still streaming, or not JSON). */
export function parseArgs(text) {
  if (typeof text !== "string" || !text) return null;
  try {
    const value = JSON.parse(text);
    return value !== null && typeof value === "object" && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

/** What a renderer returned, as a node: a string becomes text, never markup. */
export function asNode(value) {
  if (value instanceof Node) return value;
  if (value === undefined || value === null || value === false) return null;
  return h("div", { class: "tool-custom-text" }, String(value));
}

/** Call a renderer's `kind` function safely: one that throws is reported, not fatal. */
export function callRenderer(renderer, kind, view) {
  try {
    return { value: renderer[kind](view) };
  } catch (error) {
    console.warn(`the ${view.name} tool renderer's ${kind} failed:`, error);
    return { error };
  }
}

// ── Plain words for a held call ─────────────────────────────────────────────────────────

const shown = (value, limit = 120) => {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > limit ? `${text.slice(0, limit - 1)}…` : text;
};

/** What the built-in tools would do, in words (their arguments are known). */
const BUILT_IN = {
  write_file: (a) => a.path && `Write the file ${shown(a.path)}`,
  edit_file: (a) => a.path && `Change the file ${shown(a.path)}`,
  apply_patch: () => "Change files in your workspace (a patch)",
  execute_command: (a) => a.command && `Run the command ${shown(a.command)}`,
  background_process: (a) => a.command && `Start ${shown(a.command)} in the background`,
  web_fetch: (a) => a.url && `Open the web page ${shown(a.url)}`,
  web_search: (a) => a.query && `Search the web for ${shown(a.query)}`,
  send_message: (a) => a.to && `Send a message to ${shown(a.to)}`,
};

/** What a call of each risk class does, for a tool the console knows nothing else about. */
const BY_RISK = {
  read_only: "read from your workspace",
  low_mutation: "make a small change",
  file_mutation: "change files in your workspace",
  shell_mutation: "run a command that changes things",
  network: "reach the network",
  process: "start or stop a program",
  external_access: "act outside this workspace (it could send, buy or book something)",
  system_install: "install software on this machine",
  destructive: "delete or overwrite things for good",
};

/** The sentence an approval card leads with: the app's `describe`, a built-in's words, or
 * the tool's name and what its risk class means. */
export function describeCall(name, args, risk, view) {
  const renderer = renderers.get(name);
  if (renderer?.describe) {
    const { value } = callRenderer(renderer, "describe", view);
    if (typeof value === "string" && value.trim()) return value.trim();
  }
  const builtIn = BUILT_IN[name]?.(args ?? {});
  if (builtIn) return builtIn;
  const does = BY_RISK[risk];
  return does ? `Use “${name}”, which may ${does}` : `Use the tool “${name}”`;
}
