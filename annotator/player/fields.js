// A study's own fields beside the step on screen (issue 26; prepended to the player's module). The form is built
// from the study's field definitions (/api/fields/{ref}/steps/{step}); values are this annotator's own, sent
// with the step whose form is on screen. Keyboard-first:
//   F            focus the form (the player's keys rest while it has the focus)
//   a field's keys (choice, multi-choice, yes/no: shown on its buttons) pick while that field has the focus
//   Tab / Enter  next field (Enter saves the text or number just typed, or keeps the suggestion shown)
//   Ctrl+Enter   save the step's fields (suggestions shown are kept) and show the next step
//   Esc          leave the form
// What the form shows is what the store holds (issue 32): an episode or segment value shows on every step it
// covers (each save's answer, the store's, gives every form read its episode values; a segment's steps are read
// again, and so is a form read while a save changed its step or segment); "saved" shows only beside a stored
// value; a save sends only the fields the person changed (or a suggestion kept), with the value the form showed
// ("replaces": the store refuses the change when it holds another by now, and the form is read again).
// Everything from a trace, a file or an annotator is put in with textContent or an input's value, never as HTML.

class StepFields {
  constructor(player) {
    this.p = player;
    this.base = `/api/fields/${player.data.ref}/steps`;
    this.byStep = new Map(); // step -> the form payload the server sent
    this.formStep = null; // the step whose values the form shows; null while that step's form loads
    this.shownAt = performance.now();
    this.sent = new Map(); // field -> {json} of the value sent for formStep, until its save is answered
    this.touched = new Set(); // the fields the person changed on the form shown (only those are sent)
    this.answers = 0; // save answers received: a form read while one arrived may predate it
    this.answered = []; // the latest answers: {n, step, spans} (which forms each may have changed)
    this.latest = null; // the latest answer: the episode's values as the store holds them
    this.loading = new Map(); // step -> a token while its form is being read (the newest read wins)
    this.wantFocus = false;
    this.replacing = false; // true while the form of another step replaces the one shown
  }

  start() {
    const side = el(this.p.root, ".sm-side");
    this.box = document.createElement("div");
    this.box.className = "sm-section sm-fields";
    this.box.hidden = true;
    const h = document.createElement("div");
    h.className = "sm-h";
    this.title = document.createElement("span");
    h.appendChild(this.title);
    this.form = document.createElement("div");
    this.form.className = "sm-f-form";
    const hint = document.createElement("div");
    hint.className = "sm-f-hint";
    hint.textContent = "F: fill in · a field's keys pick · Tab/Enter: next field · Ctrl+Enter: save and next step · Esc: leave";
    this.box.append(h, this.form, hint);
    side.insertBefore(this.box, el(side, ".sm-undo-row"));
    this.p.on(this.form, "keydown", (e) => this.onKey(e));
    this.p.on(this.form, "change", (e) => {
      const name = e.target.dataset && e.target.dataset.field;
      if (name && !this.replacing) this.commit(name);
    });
    this.p.on(this.form, "input", (e) => {
      const name = e.target.dataset && e.target.dataset.field;
      if (!name || this.replacing) return;
      this.touched.add(name);
      this.note(name);
    });
    this.showStep(this.p.cur);
    this.load(this.p.cur, true);
  }

  // True when a key press belongs to the form (the player then leaves it alone).
  // (The player lives in a shadow root: at the document an event's target is the host, so the path is read.)
  owns(e) {
    const target = e.composedPath ? e.composedPath()[0] : e.target;
    return !!this.form && target instanceof Node && this.form.contains(target);
  }

  focus() {
    const first = this.controls()[0];
    if (first) first.focus();
    else if (this.box && this.box.hidden) this.p.say("This study has no fields (Studies page)");
  }

  controls() {
    return this.form ? [...this.form.querySelectorAll("[data-control]")] : [];
  }

  // On every step change, at once: the form shows this step's values or says it is loading, never another step's.
  showStep(step) {
    if (!this.form) return;
    if (this.byStep.has(step)) this.render(step);
    else {
      this.formStep = null;
      this.title.textContent = `Fields of step ${step} (loading…)`; // the step on screen, whose form this will be
      for (const c of this.controls()) c.setAttribute("aria-disabled", "true");
      this.form.classList.add("sm-f-loading");
    }
  }

  // After an undo or redo (which may change any step): forget what was read and read the step on screen again.
  // What was sent before is forgotten too: after an undo, picking that value again must be sent again.
  reload() {
    this.byStep.clear();
    this.sent = new Map();
    this.load(this.p.cur, true);
  }

  async load(step, force) {
    if (!force && this.byStep.has(step)) {
      if (this.formStep !== step && this.p.cur === step) this.render(step); // never rebuilt under the typing
      return;
    }
    if (!force && this.loading.has(step)) return; // one request per step at a time
    const token = {};
    this.loading.set(step, token);
    const answers = this.answers;
    try {
      const body = await this.p.getJSON(`${this.base}/${step}`);
      if (this.loading.get(step) !== token) return; // a newer read of this step is under way
      if (this.answers !== answers) {
        // A save was answered while this was read: the form may predate it. The episode's values are taken
        // from the latest answer; a form whose step or segment a save changed meanwhile is read again.
        const since = this.answered.filter((a) => a.n > answers);
        const changed = since.length < this.answers - answers
          || since.some((a) => a.step === step || a.spans.some(([x, y]) => x <= step && step <= y));
        if (changed) {
          this.loading.delete(step);
          this.load(step, force);
          return;
        }
        this.overlay(body, this.latest);
      }
      this.byStep.set(step, body);
      // A forced read (after undo/redo) redraws the form; otherwise only a form not yet on screen is drawn.
      if (this.p.cur === step && (force || this.formStep !== step)) this.render(step);
    } catch (err) {
      this.p.say(`Could not read the fields of step ${step}: ${err.message}`, true);
    } finally {
      if (this.loading.get(step) === token) this.loading.delete(step);
    }
  }

  render(step) {
    const body = this.byStep.get(step);
    if (!body) return;
    this.box.hidden = !body.fields.length;
    const active = this.form.getRootNode().activeElement;
    const focused = active && this.form.contains(active) ? active.dataset.field : null;
    if (this.formStep !== step) {
      this.shownAt = performance.now();
      this.sent = new Map();
    }
    this.touched = new Set(); // the controls are built anew from the store's values
    const another = this.formStep !== step;
    this.formStep = step;
    this.form.classList.remove("sm-f-loading");
    this.title.textContent = `Fields of step ${step}`;
    // Removing a focused input fires its "change": that text was typed on the step shown before, so it is not
    // sent again now (it would go to this step); Ctrl+Enter and Enter have saved it on its own step.
    this.replacing = another;
    try {
      this.form.replaceChildren();
    } finally {
      this.replacing = false;
    }
    for (const f of body.fields) this.form.appendChild(this.field(f, body));
    this.sync();
    const again = (this.wantFocus ? this.controls()[0] : null)
      || (focused ? this.form.querySelector(`[data-control][data-field="${CSS.escape(focused)}"]`) : null);
    this.wantFocus = false;
    if (again) again.focus();
    // The next step's form is read now, so "save and next step" shows it at once (never the keys' wait).
    if (step + 1 < this.p.n && !this.byStep.has(step + 1)) this.load(step + 1, false);
  }

  field(f, body) {
    const row = document.createElement("div");
    row.className = "sm-f-field";
    row.dataset.name = f.name;
    const label = document.createElement("div");
    label.className = "sm-f-label";
    label.textContent = f.scope === "step" ? f.name : `${f.name} (${f.scope === "episode" ? "episode" : "segment"})`;
    row.appendChild(label);
    if (f.guideline) {
      const g = document.createElement("div");
      g.className = "sm-f-guideline";
      g.textContent = f.guideline;
      row.appendChild(g);
    }
    let control;
    if (f.kind === "text" || f.kind === "number") {
      control = document.createElement("input");
      control.className = "sm-input";
      control.type = f.kind === "number" ? "number" : "text";
      if (f.kind === "number") {
        if (f.min !== undefined) control.min = String(f.min);
        if (f.max !== undefined) control.max = String(f.max);
        control.step = f.integer ? "1" : "any";
      } else control.maxLength = f.max_length || 5000;
    } else {
      control = document.createElement("div");
      control.tabIndex = 0;
      control.className = "sm-f-choices";
      control.setAttribute("role", f.kind === "multi_choice" ? "group" : "radiogroup");
      const options = f.kind === "boolean" ? [true, false] : f.options;
      options.forEach((option, i) => {
        const b = document.createElement("button");
        b.type = "button";
        b.tabIndex = -1;
        b.className = "sm-btn sm-f-option";
        const key = f.option_keys[i] || "";
        b.textContent = `${key ? key + " " : ""}${f.kind === "boolean" ? (option ? "yes" : "no") : option}`;
        b.dataset.value = JSON.stringify(option);
        b.setAttribute("aria-pressed", "false");
        b.addEventListener("click", (e) => {
          e.stopPropagation();
          this.pick(f, control, option);
        });
        control.appendChild(b);
      });
    }
    control.dataset.control = "1";
    control.dataset.field = f.name;
    control.setAttribute("aria-label", `${f.name}${f.guideline ? ": " + f.guideline : ""}`);
    row.appendChild(control);
    const note = document.createElement("div");
    note.className = "sm-f-note";
    row.appendChild(note);
    return row;
  }

  // The form shown, from what the store holds for its step (byStep): a control the person has not changed shows
  // the stored value (else the suggestion); one the person changed keeps what they made (sent or not yet).
  sync() {
    const body = this.byStep.get(this.formStep);
    if (!body) return;
    for (const control of this.controls()) {
      const name = control.dataset.field;
      if (!this.touched.has(name)) {
        const saved = body.values[name];
        const suggestion = (body.suggestions[name] || [])[0];
        const target = saved ? saved.value : suggestion ? suggestion.value : null;
        if (JSON.stringify(this.read(control)) !== JSON.stringify(target)) this.show(control, target);
      }
      this.note(name);
    }
  }

  // True when a control's value (read()) is the stored value `saved` (undefined: none stored).
  same(value, saved) {
    return JSON.stringify(value === undefined ? null : value) === JSON.stringify(saved ? saved.value : null);
  }

  show(control, value) {
    if (control.tagName === "INPUT") {
      const text = value === undefined || value === null ? "" : String(value);
      if (control.value !== text) control.value = text;
      return;
    }
    const picked = Array.isArray(value) ? value : value === undefined || value === null ? [] : [value];
    for (const b of control.querySelectorAll(".sm-f-option")) {
      b.setAttribute("aria-pressed", picked.includes(JSON.parse(b.dataset.value)) ? "true" : "false");
    }
  }

  // A field's note says what the store holds: "saved" only when the control shows the stored value.
  note(name) {
    const body = this.byStep.get(this.formStep);
    const control = this.form.querySelector(`[data-control][data-field="${CSS.escape(name)}"]`);
    const row = control ? control.closest(".sm-f-field") : null;
    if (!body || !row) return;
    const note = row.querySelector(".sm-f-note");
    const saved = body.values[name];
    const value = this.read(control);
    const suggestion = (body.suggestions[name] || [])[0];
    const pending = this.sent.get(name);
    const suggested = !saved && !this.touched.has(name) && suggestion !== undefined;
    row.classList.toggle("sm-suggested", suggested);
    if (pending && pending.json === JSON.stringify(value)) note.textContent = "saving…";
    else if (saved && this.same(value, saved)) note.textContent = `saved (${saved.origin})`;
    else if (suggested) note.textContent = `suggested by ${suggestion.source}: Enter or Ctrl+Enter keeps it, or change it`;
    else if (this.touched.has(name) && !this.same(value, saved)) {
      note.textContent = "not saved yet: Enter or Ctrl+Enter saves it";
    } else note.textContent = "";
  }

  definition(name) {
    const body = this.byStep.get(this.formStep);
    return body ? body.fields.find((f) => f.name === name) : undefined;
  }

  // The value a control holds now (undefined: nothing to save; null: clear a saved value).
  read(control) {
    const f = this.definition(control.dataset.field);
    if (!f) return undefined;
    if (f.kind === "text" || f.kind === "number") {
      const text = control.value.trim();
      if (!text) return null;
      return f.kind === "number" ? Number(text) : text;
    }
    const picked = [...control.querySelectorAll('[aria-pressed="true"]')].map((b) => JSON.parse(b.dataset.value));
    // nothing picked is no value (null: clears a saved one, else nothing is sent), never an empty list
    if (f.kind === "multi_choice") return picked.length ? picked : null;
    return picked.length ? picked[0] : null;
  }

  pick(f, control, option) {
    for (const b of control.querySelectorAll(".sm-f-option")) {
      const value = JSON.parse(b.dataset.value);
      if (f.kind === "multi_choice") {
        if (value === option) b.setAttribute("aria-pressed", b.getAttribute("aria-pressed") === "true" ? "false" : "true");
      } else b.setAttribute("aria-pressed", value === option ? "true" : "false");
    }
    this.touched.add(f.name);
    this.commit(f.name);
  }

  // Send a field's value if the person changed it (or keeps the suggestion shown) and it differs from what is
  // saved (or was sent) for the step whose form is on screen. A field the person did not change is never sent:
  // saving one field never clears another.
  commit(name) {
    const step = this.formStep;
    const control = this.form.querySelector(`[data-control][data-field="${CSS.escape(name)}"]`);
    if (step === null || step !== this.p.cur || !control || !this.byStep.has(step)) {
      this.p.say("Not saved: the form of the step on screen is still loading", true);
      return;
    }
    const f = this.definition(name);
    const value = this.read(control);
    const form = this.byStep.get(step);
    const saved = (form.values || {})[name];
    if (value === undefined) return;
    if (!this.touched.has(name)) {
      const suggestion = (form.suggestions[name] || [])[0];
      if (saved || value === null || !suggestion || JSON.stringify(suggestion.value) !== JSON.stringify(value)) return;
    }
    const json = JSON.stringify(value);
    const pending = this.sent.get(name);
    const before = pending ? pending.json : JSON.stringify(saved ? saved.value : null); // what the form showed
    if (before === json) return;
    if (f.kind === "number" && value !== null && !Number.isFinite(value)) {
      this.p.say(`${name}: not a number`, true);
      return;
    }
    const token = { json };
    this.sent.set(name, token);
    const body = { field: name, value, seconds: (performance.now() - this.shownAt) / 1000 };
    if (f.scope === "segment") {
      // The place: a segment being marked (from its start to this step), else the saved segment that holds
      // this step (so that clearing or changing it reaches it), else this step alone. The form of the step on
      // screen is what the reply holds; the segment's other steps are read again when shown.
      if (this.p.segStart !== null) {
        body.start = Math.min(this.p.segStart, step);
        body.end = Math.max(this.p.segStart, step);
      } else if (saved) {
        body.start = saved.step;
        body.end = saved.end;
      } else {
        body.start = step;
        body.end = step;
      }
    }
    // The value replaced, as the form showed it: the store refuses the change if it holds another by now. (A
    // segment being marked over another span than the saved one goes to a slot the form has not shown.)
    if (f.scope !== "segment" || !saved || (saved.step === body.start && saved.end === body.end)) {
      body.replaces = JSON.parse(before);
    }
    const spans = f.scope !== "segment" ? [] : saved ? [[saved.step, saved.end], [body.start, body.end]] : [[body.start, body.end]];
    this.send(step, body, spans, token);
    this.note(name);
  }

  // Forget the forms read for the steps of these spans (a segment value there changed), but the form on screen.
  forget(spans, keep) {
    for (const s of [...this.byStep.keys()]) {
      if (s !== keep && s !== this.p.cur && spans.some(([a, b]) => a <= s && s <= b)) this.byStep.delete(s);
    }
  }

  send(step, body, spans, token) {
    this.p.enqueue(
      `${this.base}/${step}`,
      body,
      (reply) => {
        this.answers++;
        this.answered.push({ n: this.answers, step: reply.step, spans });
        if (this.answered.length > 100) this.answered.shift();
        this.latest = reply;
        if (this.sent.get(body.field) === token) this.sent.delete(body.field); // stored: no longer pending
        this.byStep.set(reply.step, reply);
        this.spread(reply);
        this.forget(spans, reply.step);
        this.p.say(reply.message || "");
        this.sync(); // the form shown, from the store's answer
        const next = this.p.cur + 1;
        if (next < this.p.n && !this.byStep.has(next)) this.load(next, false);
      },
      (err) => {
        if (this.sent.get(body.field) === token) this.sent.delete(body.field);
        this.p.say(`Not saved: ${err.message}`, true);
        if (err.status === 409) this.reload(); // the store holds another value by now: show what it holds
        else this.note(body.field);
      },
    );
  }

  // A save's answer holds the episode's values as the store now holds them: every form read shows them too.
  spread(reply) {
    for (const [s, form] of this.byStep) if (s !== reply.step) this.overlay(form, reply);
  }

  // A form's episode values, as a save's answer says the store holds them.
  overlay(form, reply) {
    for (const f of reply.fields) {
      if (f.scope !== "episode") continue;
      if (reply.values[f.name]) form.values[f.name] = reply.values[f.name];
      else delete form.values[f.name];
    }
  }

  next(control, dir) {
    const all = this.controls();
    const at = all.indexOf(control);
    const target = all[at + dir];
    if (target) target.focus();
  }

  onKey(e) {
    const control = e.target.closest ? e.target.closest("[data-control]") : null;
    if (!control) return;
    const name = control.dataset.field;
    const f = this.definition(name);
    let handled = true;
    if (e.key === "Escape") {
      control.blur();
    } else if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      for (const c of this.controls()) this.commit(c.dataset.field);
      if (this.p.cur >= this.p.n - 1) this.p.say("Saved; this is the last step");
      else {
        this.wantFocus = true;
        this.p.go(this.p.cur + 1);
      }
    } else if (e.key === "Enter" && !e.shiftKey && !e.altKey) {
      this.commit(name);
      this.next(control, 1);
    } else if (f && control.tagName !== "INPUT" && !e.ctrlKey && !e.metaKey && !e.altKey) {
      const i = (f.option_keys || []).indexOf(e.key.toLowerCase());
      const options = f.kind === "boolean" ? [true, false] : f.options || [];
      if (i >= 0 && i < options.length) this.pick(f, control, options[i]);
      else if (e.key.toLowerCase() === "f") this.focus(); // F: back to the first field, as from the player
      else handled = e.key.length === 1; // other printable keys do nothing here (never the player's)
    } else handled = false;
    if (handled) {
      e.preventDefault();
      e.stopPropagation();
    }
  }
}
