// The form that answers a run's interrupts: approvals of held tool calls, and questions the
// agent asked (ask_user).
//
// AG-UI wants one resume that covers every open interrupt, so each card records its answer
// and the resume is sent once all of them have one (at once, when there is just one).

import { findToolCall } from "./agui.js";
import { h } from "./dom.js";
import { describeCall, parseArgs } from "./tools.js";
import { prettyJson } from "./view.js";

/** One argument's value, shown as a person reads it: text as it is, the rest as JSON, and
 * long values cut (the whole call is under "Why am I asked?"). */
function plainValue(value) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > 300 ? `${text.slice(0, 299)}…` : text;
}

export class InterruptsView {
  /** `onResume(entries)` sends `resume: entries`; it returns a promise. */
  constructor(section, onResume) {
    this.section = section;
    this.onResume = onResume;
    this.key = "";
    this.answers = new Map();
  }

  render(thread) {
    const open = thread.status === "interrupted" && !thread.resumed ? thread.interrupts : [];
    // Rebuild only when the set of interrupts changes: the form holds what a person typed.
    const key = `${thread.runId}|${open.map((i) => i.id).join(",")}`;
    if (key === this.key) return;
    this.key = key;
    this.answers = new Map();
    this.section.hidden = open.length === 0;
    if (open.length === 0) {
      this.section.replaceChildren();
      return;
    }
    const heading =
      open.length === 1
        ? "The run is waiting for you"
        : `The run is waiting for ${open.length} answers`;
    this.status = h("p", { class: "interrupt-progress", role: "status" });
    this.section.replaceChildren(
      h("h2", {}, heading),
      ...open.map((interrupt) =>
        interrupt.reason === "question"
          ? this.questionCard(interrupt)
          : this.approvalCard(interrupt, thread),
      ),
      this.status,
    );
    this.open = open;
    // Bring the request into view (its CSS keeps it clear of the docked composer).
    this.section.scrollIntoView?.({ block: "nearest" });
  }

  /** Record one answer; send the resume when every interrupt has one. */
  answer(interrupt, card, entry) {
    this.answers.set(interrupt.id, entry);
    card.classList.add("answered");
    for (const control of card.querySelectorAll("button, input, textarea")) control.disabled = true;
    const missing = this.open.length - this.answers.size;
    if (missing > 0) {
      this.status.textContent = `${missing} more to answer before the run goes on.`;
      return;
    }
    this.status.textContent = "Sending your answers…";
    const entries = this.open.map((i) => this.answers.get(i.id));
    this.onResume(entries).catch((error) => {
      // The resume did not go through: let the person try again.
      this.status.textContent = `Could not send: ${error.message}`;
      this.key = "";
    });
  }

  approvalCard(interrupt, thread) {
    const found = findToolCall(thread, interrupt.toolCallId);
    const name =
      found?.call.function.name ?? interrupt.metadata?.tool ?? interrupt.toolCallId ?? "a tool";
    const argsText = found?.call.function.arguments ?? interrupt.metadata?.arguments ?? "";
    const args = parseArgs(argsText);
    const risk = interrupt.metadata?.risk;
    const summary = describeCall(name, args, risk, {
      name,
      args,
      argsText,
      status: "held",
      result: null,
      progress: null,
      h,
    });
    const id = interrupt.id;
    const reason = h("input", {
      type: "text",
      id: `deny-reason-${id}`,
      testid: "deny-reason",
      placeholder: "Why not? (the agent sees this)",
    });
    const editor = h("textarea", {
      testid: "edit-args",
      rows: 8,
      spellcheck: "false",
      "aria-label": `Arguments for ${name}`,
      hidden: true,
    });
    editor.value = prettyJson(argsText);
    const editError = h("p", { class: "error", role: "alert", hidden: true });

    const card = h("article", {
      class: "interrupt interrupt-approval",
      testid: "interrupt",
      dataset: { interruptId: id, reason: interrupt.reason ?? "" },
    });
    const decide = (decision) => {
      const payload = { decision };
      if (decision !== "deny" && !editor.hidden) {
        // Approving an edited call: the arguments must be a JSON object.
        let edited;
        try {
          edited = JSON.parse(editor.value);
        } catch (error) {
          editError.textContent = `The arguments are not valid JSON: ${error.message}`;
          editError.hidden = false;
          return;
        }
        if (edited === null || typeof edited !== "object" || Array.isArray(edited)) {
          editError.textContent = "The arguments must be a JSON object.";
          editError.hidden = false;
          return;
        }
        payload.arguments = edited;
      }
      if (decision === "deny" && reason.value.trim()) payload.reason = reason.value.trim();
      this.answer(interrupt, card, { interruptId: id, status: "resolved", payload });
    };
    const original = editor.value;
    const setEditing = (editing) => {
      editor.hidden = !editing;
      editButton.setAttribute("aria-expanded", String(editing));
      editButton.textContent = editing ? "Keep the original" : "Edit";
      if (editing) editor.focus();
      else {
        editError.hidden = true;
        editor.value = original; // a cancelled edit leaves nothing behind
      }
    };
    const editButton = h(
      "button",
      {
        type: "button",
        testid: "edit",
        "aria-expanded": "false",
        onclick: () => setEditing(editor.hidden),
      },
      "Edit",
    );
    editor.addEventListener("keydown", (event) => {
      // Escape cancels the edit, and the keyboard is back where it was.
      if (event.key === "Escape") {
        event.preventDefault();
        setEditing(false);
        editButton.focus();
      }
    });
    const headingId = `interrupt-title-${id}`;
    card.setAttribute("aria-labelledby", headingId);
    // What the call would do, in plain words; its arguments as a list, not JSON; and the
    // policy's own words (why a person is asked) behind a disclosure, for who wants them.
    const details =
      args === null
        ? h("pre", { class: "tool-args", testid: "interrupt-args" }, prettyJson(argsText))
        : h(
            "dl",
            { class: "interrupt-args", testid: "interrupt-args" },
            ...Object.entries(args).flatMap(([key, value]) => [
              h("dt", {}, key),
              h("dd", {}, plainValue(value)),
            ]),
          );
    card.append(
      h(
        "h3",
        { id: headingId, testid: "interrupt-summary" },
        `The agent wants to ${summary.charAt(0).toLowerCase()}${summary.slice(1)}.`,
      ),
      details,
      h(
        "details",
        { class: "interrupt-why", testid: "interrupt-why" },
        h("summary", {}, "Why am I asked?"),
        interrupt.message ? h("p", { testid: "interrupt-reason" }, interrupt.message) : null,
        h(
          "p",
          {},
          "Tool ",
          h("code", { testid: "interrupt-tool-name" }, name),
          risk ? [", risk class ", h("code", { testid: "interrupt-risk" }, risk)] : null,
          ":",
        ),
        h("pre", { class: "tool-args" }, prettyJson(argsText)),
      ),
      editor,
      editError,
      h(
        "div",
        { class: "actions" },
        h(
          "button",
          { type: "button", class: "primary", testid: "approve", onclick: () => decide("approve") },
          "Approve",
        ),
        h(
          "button",
          {
            type: "button",
            testid: "approve-always",
            title: "Approve, and do not ask again for calls like this one",
            onclick: () => decide("approve_always"),
          },
          "Approve always",
        ),
        editButton,
      ),
      h(
        "div",
        { class: "actions deny" },
        h("label", { for: `deny-reason-${id}`, class: "visually-hidden" }, "Reason to deny"),
        reason,
        h(
          "button",
          { type: "button", class: "danger", testid: "deny", onclick: () => decide("deny") },
          "Deny",
        ),
      ),
    );
    return card;
  }

  questionCard(interrupt) {
    const id = interrupt.id;
    const asked = interrupt.metadata?.questions;
    const questions = Array.isArray(asked) ? asked : [];
    const fields = questions.map((question, qi) => {
      const name = `q-${id}-${qi}`;
      const type = question.multiSelect ? "checkbox" : "radio";
      const options = (question.options ?? []).map((option, oi) => {
        const inputId = `${name}-${oi}`;
        return h(
          "div",
          { class: "option" },
          h("input", {
            type,
            id: inputId,
            name,
            value: option.label,
            testid: "question-option",
            // A recommended option is the default choice of a single-answer question.
            checked: type === "radio" && option.recommended === true,
          }),
          h(
            "label",
            { for: inputId },
            option.label,
            option.recommended ? h("span", { class: "badge" }, "recommended") : null,
            option.description
              ? h("span", { class: "option-description" }, option.description)
              : null,
          ),
        );
      });
      const note = h("textarea", {
        rows: 2,
        id: `${name}-note`,
        testid: "question-note",
        placeholder: options.length ? "Anything to add? (optional)" : "Your answer",
      });
      const fieldset = h(
        "fieldset",
        { class: "question", testid: "question", dataset: { header: question.header ?? "" } },
        h("legend", {}, question.header ?? `Question ${qi + 1}`),
        question.question ? h("p", {}, question.question) : null,
        ...options,
        h("label", { for: `${name}-note`, class: "visually-hidden" }, "Note"),
        note,
      );
      return { question, fieldset, name, note };
    });
    const card = h("form", {
      class: "interrupt interrupt-question",
      testid: "interrupt",
      dataset: { interruptId: id, reason: "question" },
    });
    card.addEventListener("submit", (event) => {
      event.preventDefault();
      const answers = fields.map(({ question, fieldset, name, note }) => {
        const checked = fieldset.querySelectorAll(`input[name="${CSS.escape(name)}"]:checked`);
        const selected = [...checked].map((input) => input.value);
        const answer = { header: question.header ?? "", selected };
        if (note.value.trim()) answer.note = note.value.trim();
        return answer;
      });
      this.answer(interrupt, card, { interruptId: id, status: "resolved", payload: { answers } });
    });
    card.append(
      h("h3", {}, "A question from the agent"),
      interrupt.message ? h("p", { class: "interrupt-message" }, interrupt.message) : null,
      ...fields.map((f) => f.fieldset),
      h(
        "div",
        { class: "actions" },
        h("button", { type: "submit", class: "primary", testid: "question-submit" }, "Submit"),
      ),
    );
    return card;
  }
}
