// Grounding on UI steps (prepended to the player's module): which object the action acted on, object labels,
// missing and wrong boxes. Reads and writes /api/grounding/{ref}/steps/{step}; the store keeps every
// annotation with its author, never editing the converted record. Text is shown with textContent only.

class Grounding {
  constructor(player) {
    this.p = player;
    this.base = `/api/grounding/${player.data.ref}`;
    this.byStep = new Map(); // step -> last payload from the server
    this.mode = null; // "draw" | "redraw" while a box is being dragged
    this.drag = null;
  }

  async start() {
    const r = this.p.root;
    el(r, ".sm-grounding").hidden = false;
    try {
      const meta = await this.p.getJSON(`${this.base}/labels`);
      this.fill(el(r, ".sm-g-label"), meta.labels || []);
      this.fill(el(r, ".sm-g-type"), meta.types || ["UNKNOWN_TYPE"]);
    } catch (err) {
      this.p.say(`Grounding unavailable: ${err.message}`, true);
    }
  }

  fill(select, values) {
    select.replaceChildren();
    for (const v of values) {
      const o = document.createElement("option");
      o.value = v;
      o.textContent = v;
      select.appendChild(o);
    }
  }

  // The step's annotations, fetched after the frame is painted (never on the key path).
  async load(step, force) {
    if (!force && this.byStep.has(step)) return this.render(step);
    try {
      const body = await this.p.getJSON(`${this.base}/steps/${step}`);
      this.byStep.set(step, body);
      if (this.p.cur === step) this.render(step);
    } catch (err) {
      this.p.say(`Could not read the grounding of step ${step}: ${err.message}`, true);
    }
  }

  // The effective target of `step` (everyone's annotations, newest wins), or undefined until it is read.
  target(step) {
    const body = this.byStep.get(step);
    return body ? body.target || null : undefined;
  }

  drawn(step) {
    return (this.byStep.get(step) || {}).drawn || [];
  }

  render(step) {
    const r = this.p.root;
    const body = this.byStep.get(step);
    el(r, ".sm-g-step").textContent = String(step);
    const target = el(r, ".sm-g-target");
    const list = el(r, ".sm-g-list");
    list.replaceChildren();
    if (!body) {
      target.textContent = "loading…";
      return;
    }
    target.textContent = this.describe(body.target);
    for (const a of body.annotations || []) {
      const row = document.createElement("div");
      const text = document.createElement("span");
      const what =
        a.kind === "label" ? `label ${a.label} on #${a.object_index}` :
        a.kind === "target" ? `target #${a.object_index}` :
        a.kind === "no_target" ? "no valid target" :
        a.kind === "box" ? `drawn box #${a.object_index} ${a.type || ""} ${a.text || ""}` :
        `box of #${a.object_index} redrawn`;
      text.textContent = `${what} — ${a.user}`;
      const x = document.createElement("button");
      x.textContent = "✕";
      x.title = "Remove this annotation";
      x.addEventListener("click", () => this.remove(step, a.id));
      row.append(text, x);
      list.appendChild(row);
    }
    for (const o of body.orphans || []) {
      const row = document.createElement("div");
      row.textContent = `not placed: ${o.reason}`;
      list.appendChild(row);
    }
    this.p.markTarget();
    this.p.drawOverlay();
  }

  // One sentence on the target every highlight shows: who chose it, and the converter's choice beside a
  // correction.
  describe(t) {
    if (!t) return "No action on this step.";
    const what = (i) => (i === null || i === undefined ? "no object" : `object #${i}`);
    const rule = t.converter_rule ? ` (rule ${t.converter_rule})` : "";
    if (t.source !== "annotator") return `Target: ${what(t.index)}, chosen by the converter${rule}`;
    const by = t.authors && t.authors.length ? t.authors.join(", ") : "an annotator";
    const set = t.index === null || t.index === undefined ? "Target: none (no valid target)" : `Target: ${what(t.index)}`;
    const converter = t.converter_index === t.index ? "the converter chose the same" : `the converter chose ${what(t.converter_index)}${rule}`;
    return `${set}, set by ${by}; ${converter}`;
  }

  selected() {
    const i = this.p.selected;
    if (i === null || i === undefined) {
      this.p.say("Select an object first: click it on the screenshot or in the table", true);
      return null;
    }
    return i;
  }

  onAct(act) {
    const step = this.p.cur;
    if (act === "g-target") {
      const i = this.selected();
      if (i !== null) this.post(step, { kind: "target", object_index: i });
    } else if (act === "g-notarget") {
      this.post(step, { kind: "no_target" });
    } else if (act === "g-label") {
      const i = this.selected();
      const own = el(this.p.root, ".sm-g-label-text");
      const label = own.value.trim() || el(this.p.root, ".sm-g-label").value;
      if (i !== null && label) {
        own.value = "";
        this.post(step, { kind: "label", object_index: i, label });
      }
    } else if (act === "g-draw") {
      this.setMode(this.mode === "draw" ? null : "draw");
    } else if (act === "g-redraw") {
      if (this.mode === "redraw") this.setMode(null);
      else if (this.selected() !== null) this.setMode("redraw");
    } else {
      return false;
    }
    return true;
  }

  setMode(mode) {
    this.mode = mode;
    el(this.p.root, ".sm-frame").classList.toggle("sm-drawing", !!mode);
    el(this.p.root, ".sm-g-mode").textContent =
      mode === "draw" ? "drag on the screenshot to draw the missing box" :
      mode === "redraw" ? `drag the right box of object #${this.p.selected}` : "";
  }

  // Pointer position in the step's object coordinates.
  point(event) {
    const s = this.p.steps.get(this.p.cur);
    const rect = event.currentTarget.getBoundingClientRect();
    return [
      Math.round(((event.clientX - rect.left) / rect.width) * s.size[0]),
      Math.round(((event.clientY - rect.top) / rect.height) * s.size[1]),
    ];
  }

  // Returns true when the pointer event belongs to a drawing in progress.
  pointer(type, event) {
    if (!this.mode || !this.p.steps.get(this.p.cur) || !this.p.framePainted()) return false;
    if (type === "down") this.drag = { from: this.point(event), to: this.point(event), step: this.p.cur };
    else if (this.drag && type === "move") this.drag.to = this.point(event);
    else if (this.drag && type === "up") {
      const { from, to, step } = this.drag;
      this.drag = null;
      const box = [Math.min(from[0], to[0]), Math.min(from[1], to[1]), Math.max(from[0], to[0]), Math.max(from[1], to[1])];
      if (box[2] - box[0] >= 3 && box[3] - box[1] >= 3 && step === this.p.cur) {
        if (this.mode === "draw")
          this.post(step, { kind: "box", box, type: el(this.p.root, ".sm-g-type").value, text: el(this.p.root, ".sm-g-text").value });
        else this.post(step, { kind: "wrong_box", object_index: this.p.selected, box });
      }
      this.setMode(null);
    }
    this.p.drawOverlay();
    return true;
  }

  paint(ctx, k, line) {
    for (const d of this.drawn(this.p.cur)) {
      ctx.setLineDash([6, 4]);
      ctx.strokeStyle = "rgb(0,170,80)";
      ctx.lineWidth = line;
      ctx.strokeRect(d.box[0] * k, d.box[1] * k, (d.box[2] - d.box[0]) * k, (d.box[3] - d.box[1]) * k);
      ctx.setLineDash([]);
    }
    if (this.drag) {
      const [a, b] = [this.drag.from, this.drag.to];
      ctx.strokeStyle = "rgb(0,170,80)";
      ctx.lineWidth = line * 2;
      ctx.strokeRect(Math.min(a[0], b[0]) * k, Math.min(a[1], b[1]) * k, Math.abs(b[0] - a[0]) * k, Math.abs(b[1] - a[1]) * k);
    }
  }

  post(step, body) {
    this.p.enqueue(
      `${this.base}/steps/${step}`,
      body,
      (reply) => {
        this.byStep.set(step, reply);
        if (this.p.cur === step) this.render(step);
        this.p.say(reply.message || "Saved");
      },
      (err) => this.p.say(`Not saved: ${err.message}`, true),
    );
  }

  remove(step, id) {
    this.p.enqueue(
      `${this.base}/steps/${step}/annotations/${id}/remove`,
      {},
      (reply) => {
        this.byStep.set(step, reply);
        if (this.p.cur === step) this.render(step);
        this.p.say(reply.message || "Removed", reply.ok === false);
      },
      (err) => this.p.say(`Not removed: ${err.message}`, true),
    );
  }
}
