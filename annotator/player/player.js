// The stepmark step player: owns the step index in the browser, prefetches frames and step data from the
// annotator's own routes, handles keys, and sends every tag with the index of the step whose frame is on screen.
// Everything that came from a trace or a user is put into the page with textContent, never as markup.

const AHEAD = 48; // frames prefetched ahead of the step on screen (in the playing direction)
const BEHIND = 12;
const MAX_FRAMES = 800; // decoded frames kept at most (least recently used dropped)
const STEP_CHUNK = 100; // steps of per-step data fetched per request
const POLL_MS = 1000; // how often the tags are re-read (changes by other annotators)
const STATE_DEBOUNCE_MS = 600; // the step is reported to Python once it has been still this long
const PARALLEL = 6;
const INFO_DELAY_MS = 80; // a UI step's text, table and grounding are rebuilt once the keys pause this long
const HOLD_DELAY_MS = 300; // a held arrow key starts repeating after this long ...
const HOLD_EVERY_MS = 50; // ... and then moves a step this often, whatever the system's key repeat rate is

// The object table's columns, in order (a row's cell shows `objectCell(o, column)`).
const OBJECT_COLUMNS = ["i", "type", "text", "desc", "rid", "actionable", "leaf", "visible", "grid", "box", "cls"];

function objectCell(o, column) {
  if (column === "box") return o.box ? `[${o.box[0]},${o.box[1]}][${o.box[2]},${o.box[3]}]` : "no box";
  return String(o[column] ?? "");
}

const players = (window.__stepmarkPlayers = window.__stepmarkPlayers || new Map());

function clamp(v, lo, hi) {
  return Math.max(lo, Math.min(hi, v));
}

class Player {
  constructor(root, data, setStateValue, setTriggerValue) {
    this.root = root;
    this.data = data;
    this.setStateValue = setStateValue;
    this.setTriggerValue = setTriggerValue;
    this.base = `/api/replay/${data.ref}`;
    // "labels" (the Label page): the annotator's own per-step labels, kept apart from the shared tags.
    this.labels = data.mode === "labels";
    this.tagsBase = this.labels ? `/api/labels/${data.ref}` : `${this.base}/tags`;
    this.headers = { "X-Stepmark-Token": data.token, "Content-Type": "application/json" };
    this.n = 0;
    this.cur = 0;
    this.kind = "env";
    this.rewards = [];
    const locked = { episode_tags: [], step_tags: {} }; // tags the viewer may not remove (no ✕)
    this.tags = { episode_tags: [], step_tags: {}, state: "", version: "", locked };
    this.palette = [];
    this.frames = new Map(); // step -> HTMLImageElement (decoded)
    this.loading = new Map(); // step -> Promise
    this.failed = new Set();
    this.failedWhy = new Map(); // step -> the route's reason, shown instead of the frame
    this.steps = new Map(); // step -> per-step data
    this.stepChunks = new Map(); // chunk start -> Promise
    this.playing = false;
    this.fps = 5;
    this.dir = 1;
    this.segStart = null;
    this.selected = null; // UI object selected (click / row)
    this.hovered = null;
    this.queue = Promise.resolve(); // changes are sent one after another, in the order made
    this.outbox = []; // changes made and not sent yet: sent at once if the page goes away (`flush`)
    this.flushOnHide = () => this.flush();
    window.addEventListener("pagehide", this.flushOnHide);
    this.pending = 0;
    this.timers = [];
    this.listeners = [];
    this.reported = null;
    this.disposed = false;
  }

  // ---- set-up -----------------------------------------------------------------------------------------------

  async start() {
    const meta = await this.getJSON(`${this.base}/meta`);
    if (this.disposed) return;
    this.n = meta.num_steps;
    this.kind = meta.kind;
    // An environment episode shows its final observation as one step more than its transitions.
    this.finalObservation = meta.kind !== "ui" && meta.transitions === meta.num_steps - 1;
    this.rewards = meta.rewards || [];
    this.palette = meta.palette || [];
    if (this.labels) {
      this.applyTags(await this.getJSON(this.tagsBase));
      for (const sel of [".sm-seg", ".sm-undo-row", ".sm-ep-section"]) el(this.root, sel).hidden = true;
      el(this.root, ".sm-tags-title").textContent = "Your labels on step";
      el(this.root, ".sm-step-input").placeholder = "label this step";
    } else {
      this.applyTags(meta);
    }
    let start = this.data.start || 0;
    if (!this.data.start_is_explicit) {
      // Back from another page: the browser knows the step it showed last better than the server does.
      const saved = Number(window.sessionStorage.getItem(`stepmark-step:${this.data.ref}`));
      if (Number.isInteger(saved) && saved >= 0) start = saved;
    }
    this.cur = clamp(start, 0, Math.max(0, this.n - 1));
    el(this.root, ".sm-player").classList.toggle("sm-ui", this.kind === "ui");
    el(this.root, ".sm-frame").classList.toggle("sm-pixelated", this.kind !== "ui");
    el(this.root, ".sm-ui-controls").hidden = this.kind !== "ui";
    el(this.root, ".sm-objects").hidden = this.kind !== "ui";
    if (this.kind === "ui" && !this.labels) {
      this.grounding = new Grounding(this);
      this.grounding.start();
    }
    this.evaluation = new Map(); // step -> the chosen run's row (stepmark evaluate), drawn beside the recorded action
    if (this.kind === "ui" && this.data.run) {
      const run = await this.getJSON(`${this.base}/evaluation?run=${encodeURIComponent(this.data.run)}`);
      if (this.disposed) return;
      for (const [step, row] of Object.entries(run.steps || {})) this.evaluation.set(Number(step), row);
    }
    // The study's own fields (issue 26): this annotator's values, on Replay and Label alike.
    this.fields = new StepFields(this);
    this.fields.start();
    this.buildPalette();
    this.bind();
    this.show(this.cur);
    this.timers.push(setInterval(() => this.poll(), POLL_MS));
  }

  dispose() {
    this.disposed = true;
    this.playing = false;
    this.stopHold();
    if (this.resizer) this.resizer.disconnect();
    cancelAnimationFrame(this.infoFrame);
    clearTimeout(this.infoTimer);
    for (const t of this.timers) clearInterval(t);
    for (const [target, type, fn, opts] of this.listeners) target.removeEventListener(type, fn, opts);
    this.listeners = [];
    this.releaseOutbox();
  }

  releaseOutbox() {
    // A disposed player keeps its page-hide flush until every change it was given has been sent.
    if (this.disposed && !this.outbox.length) window.removeEventListener("pagehide", this.flushOnHide);
  }

  on(target, type, fn, opts) {
    target.addEventListener(type, fn, opts);
    this.listeners.push([target, type, fn, opts]);
  }

  bind() {
    const r = this.root;
    this.on(document, "keydown", (e) => this.onKey(e), true);
    this.on(document, "keyup", (e) => {
      if (e.key === this.held) this.stopHold();
    }, true);
    this.on(window, "blur", () => this.stopHold());
    this.on(r.querySelector(".sm-player"), "click", (e) => this.onClick(e));
    this.on(el(r, ".sm-fps-input"), "change", (e) => {
      this.fps = clamp(parseInt(e.target.value, 10) || 5, 1, 30);
      e.target.value = String(this.fps);
    });
    this.fps = clamp(parseInt(el(r, ".sm-fps-input").value, 10) || 5, 1, 30);
    this.on(el(r, ".sm-timeline"), "click", (e) => {
      const c = e.currentTarget;
      const rect = c.getBoundingClientRect();
      const x = (e.clientX - rect.left) / rect.width;
      this.go(Math.round(x * Math.max(0, this.n - 1)));
    });
    this.on(el(r, ".sm-step-input"), "keydown", (e) => {
      if (e.key === "Enter") this.tagFromInput("step");
    });
    this.on(el(r, ".sm-ep-input"), "keydown", (e) => {
      if (e.key === "Enter") this.tagFromInput("episode");
    });
    for (const th of r.querySelectorAll(".sm-table th")) {
      this.on(th, "click", () => this.sortBy(th.dataset.sort));
    }
    for (const sel of [".sm-obj-type", ".sm-obj-filter"]) {
      this.on(el(r, sel), "input", () => this.renderObjects(this.steps.get(this.cur)));
    }
    for (const sel of [".sm-boxes", ".sm-grid", ".sm-touch"]) {
      this.on(el(r, sel), "change", () => this.drawOverlay());
    }
    const overlay = el(r, ".sm-overlay");
    this.on(overlay, "mousedown", (e) => {
      if (this.grounding && this.grounding.pointer("down", e)) e.preventDefault();
    });
    this.on(overlay, "mouseup", (e) => {
      if (this.grounding && this.grounding.pointer("up", e)) this.justDrew = true;
    });
    this.on(overlay, "mousemove", (e) => {
      if (this.grounding && this.grounding.pointer("move", e)) return;
      const hit = this.objectAt(e);
      if (hit !== this.hovered) {
        this.hovered = hit;
        this.drawOverlay();
        this.markRows();
      }
    });
    this.on(overlay, "mouseleave", () => {
      this.hovered = null;
      this.drawOverlay();
      this.markRows();
    });
    this.on(overlay, "click", (e) => {
      if (this.justDrew) {
        this.justDrew = false;
        return;
      }
      this.selected = this.objectAt(e);
      this.drawOverlay();
      this.markRows(true);
    });
    this.on(overlay, "dblclick", () => this.zoom());
    // The timeline's width is measured only when it changes: reading it in every step forced a layout of the
    // whole page per key press (45 ms with a UI episode's object table on the page).
    this.timelineWidth = Math.round(el(r, ".sm-timeline").getBoundingClientRect().width || 600);
    this.resizer = new ResizeObserver((entries) => {
      for (const entry of entries) this.timelineWidth = Math.round(entry.contentRect.width) || this.timelineWidth;
      this.drawTimeline();
    });
    this.resizer.observe(el(r, ".sm-timeline"));
  }

  // ---- data ---------------------------------------------------------------------------------------------------

  async getJSON(url) {
    const response = await fetch(url, { headers: this.headers, credentials: "same-origin" });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(body.error || `${response.status} ${response.statusText}`);
    return body;
  }

  frameUrl(step) {
    return `${this.base}/frames/${step}?t=${encodeURIComponent(this.data.token)}`;
  }

  loadFrame(step) {
    if (this.frames.has(step)) return Promise.resolve(this.frames.get(step));
    if (this.loading.has(step)) return this.loading.get(step);
    if (this.failed.has(step)) return Promise.resolve(null);
    const img = new Image();
    img.decoding = "async";
    const p = new Promise((resolve) => {
      img.onload = () => {
        const done = img.decode ? img.decode().catch(() => undefined) : Promise.resolve();
        done.then(() => {
          this.loading.delete(step);
          this.frames.set(step, img);
          this.trimFrames();
          resolve(img);
        });
      };
      img.onerror = () => {
        this.loading.delete(step);
        this.failed.add(step);
        // An <img> cannot read why: ask once more for the route's JSON reason (too large, none stored, ...).
        fetch(this.frameUrl(step), { headers: this.headers, credentials: "same-origin" })
          .then((r) => r.json())
          .then((body) => this.failedWhy.set(step, body.error || "no frame"))
          .catch(() => this.failedWhy.set(step, "no frame"))
          .finally(() => resolve(null));
      };
    });
    this.loading.set(step, p);
    img.src = this.frameUrl(step);
    return p;
  }

  trimFrames() {
    if (this.frames.size <= MAX_FRAMES) return;
    const keep = (s) => Math.abs(s - this.cur) <= AHEAD + BEHIND;
    for (const step of this.frames.keys()) {
      if (this.frames.size <= MAX_FRAMES) break;
      if (!keep(step)) this.frames.delete(step);
    }
  }

  prefetch() {
    const order = [];
    for (let i = 1; i <= AHEAD; i++) order.push(this.cur + this.dir * i);
    for (let i = 1; i <= BEHIND; i++) order.push(this.cur - this.dir * i);
    let inflight = this.loading.size;
    for (const s of order) {
      if (inflight >= PARALLEL) break;
      if (s < 0 || s >= this.n || this.frames.has(s) || this.loading.has(s) || this.failed.has(s)) continue;
      this.loadFrame(s).then(() => this.prefetch());
      inflight++;
    }
    this.loadSteps(this.cur);
    this.loadSteps(clamp(this.cur + this.dir * STEP_CHUNK, 0, Math.max(0, this.n - 1)));
  }

  loadSteps(step) {
    const start = Math.floor(step / STEP_CHUNK) * STEP_CHUNK;
    if (this.stepChunks.has(start)) return this.stepChunks.get(start);
    const p = this.getJSON(`${this.base}/steps?start=${start}&end=${start + STEP_CHUNK}`)
      .then((body) => {
        for (const s of body.steps) this.steps.set(s.index, s);
        if (step <= this.cur + STEP_CHUNK && !this.disposed) {
          this.renderStepTexts();
          this.renderStepInfo();
        }
      })
      .catch((err) => {
        this.stepChunks.delete(start);
        this.say(`Could not load step data: ${err.message}`, true);
      });
    this.stepChunks.set(start, p);
    return p;
  }

  // ---- showing a step ---------------------------------------------------------------------------------------

  go(step) {
    if (this.n === 0) return;
    const target = clamp(step, 0, this.n - 1);
    this.dir = target >= this.cur ? 1 : -1;
    this.show(target);
  }

  show(step) {
    if (step !== this.cur) {
      // A selected object belongs to the step it was picked on: drop it now, not when the table is rebuilt
      // (that waits for the keys to pause), so a click or a grounding action in between never applies another
      // step's object index to this step.
      this.selected = null;
      this.hovered = null;
    }
    this.cur = step;
    try {
      window.sessionStorage.setItem(`stepmark-step:${this.data.ref}`, String(step));
    } catch (err) {
      // Storage full or disabled: the URL and the server still know the step.
    }
    const frame = this.frames.get(step);
    if (frame) {
      this.draw(step, frame);
    } else {
      this.drawPending(step);
      this.loadFrame(step).then((img) => {
        if (this.cur !== step || this.disposed) return;
        if (img) this.draw(step, img);
        else this.drawMissing(step);
      });
    }
    if (this.fields) this.fields.showStep(step); // at once: never the previous step's values under this step
    this.renderHeader();
    this.renderStepTags();
    this.renderStepTexts();
    this.drawTimeline();
    this.prefetch();
    this.scheduleReport();
    // The step's text, object table and grounding can wait for the frame to be painted (a table of a few
    // hundred rows costs tens of milliseconds of layout): rebuilt once the keys pause, so quick presses and
    // playback never wait for it.
    cancelAnimationFrame(this.infoFrame);
    clearTimeout(this.infoTimer);
    this.infoFrame = requestAnimationFrame(() => {
      this.infoTimer = setTimeout(() => {
        if (!this.disposed) this.renderStepInfo();
      }, this.kind === "ui" ? INFO_DELAY_MS : 0);
    });
  }

  // `data-step`: the step the player is on (its number is in the header); `data-shown`: the step whose frame is
  // painted on the canvas, "" while a placeholder stands there. The two differ only while a frame loads, and then
  // the canvas shows the placeholder, never another step's frame: a key acts on `cur`, the number on screen.
  markFrame(step, note, shown) {
    const box = el(this.root, ".sm-frame");
    box.dataset.step = String(step);
    box.dataset.shown = shown ? String(step) : "";
    el(this.root, ".sm-frame-note").textContent = note || "";
  }

  framePainted() {
    return el(this.root, ".sm-frame").dataset.shown === String(this.cur);
  }

  draw(step, img) {
    const canvas = el(this.root, ".sm-canvas");
    if (canvas.width !== img.naturalWidth || canvas.height !== img.naturalHeight) {
      canvas.width = img.naturalWidth;
      canvas.height = img.naturalHeight;
    }
    const ctx = canvas.getContext("2d");
    ctx.imageSmoothingEnabled = this.kind === "ui";
    ctx.drawImage(img, 0, 0);
    // As tall as the window allows: the grid gives the frame's column this width (the canvas fills it), so the
    // object table and the side panel take the rest of the row. A UI screenshot is never shown above its own
    // size; an environment frame (Procgen is 64x64) is enlarged with crisp pixels, at least to 384 px.
    const ratio = (img.naturalWidth / Math.max(1, img.naturalHeight)).toFixed(5);
    const tall = this.kind === "ui" ? `min(${img.naturalHeight}px, 100vh - 300px)` : "max(384px, 100vh - 300px)";
    this.frameWidth(`calc(${tall} * ${ratio})`);
    this.markFrame(step, "", true);
    this.drawOverlay();
  }

  frameWidth(width) {
    if (this.shownWidth === width) return;
    this.shownWidth = width;
    el(this.root, ".sm-player").style.setProperty("--frame-w", width);
  }

  zoom() {
    // UI screenshots only: an environment frame is already shown as large as the window allows.
    if (this.kind === "ui") el(this.root, ".sm-player").classList.toggle("sm-zoom");
  }

  blank() {
    // The previous step's frame is wiped at once (same size, so the page does not jump): it must never stand
    // under the new step's number, where a digit pressed now would tag the new step.
    const canvas = el(this.root, ".sm-canvas");
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "#2b2b30";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    el(this.root, ".sm-overlay").getContext("2d").clearRect(0, 0, canvas.width, canvas.height);
  }

  drawPending(step) {
    this.blank();
    this.markFrame(step, `step ${step}: loading…`, false);
  }

  drawMissing(step) {
    this.blank();
    this.markFrame(step, this.failedWhy.get(step) || `step ${step}: no frame`, false); // the reason names the step
  }

  renderHeader() {
    const final = this.finalObservation && this.cur === this.n - 1 ? " · the final observation" : "";
    el(this.root, ".sm-stepno").textContent = this.n ? `step ${this.cur} of ${this.n - 1}${final}` : "no steps";
    el(this.root, ".sm-cur").textContent = String(this.cur);
    const play = el(this.root, ".sm-play");
    play.textContent = this.playing ? "❚❚ Pause" : "▶ Play";
    play.classList.toggle("sm-on", this.playing);
    const seg = el(this.root, ".sm-seg-state");
    seg.textContent = this.segStart === null ? "" : `from step ${this.segStart} to ${this.cur}`;
    el(this.root, '[data-act="seg-tag"]').disabled = this.segStart === null;
  }

  stepTags(step) {
    return this.tags.step_tags[String(step)] || [];
  }

  // `locked`: labels the viewer may not remove (another annotator's, on an episode the viewer may not review: the
  // server's `locked` tags) are shown with no ✕.
  chips(container, labels, onRemove, locked = []) {
    container.replaceChildren();
    if (!labels.length) {
      const none = document.createElement("span");
      none.className = "sm-none";
      none.textContent = "none yet";
      container.appendChild(none);
      return;
    }
    for (const label of labels) {
      const chip = document.createElement("span");
      chip.className = "sm-chip";
      const text = document.createElement("span");
      text.textContent = label;
      chip.append(text);
      if (locked.includes(label)) {
        chip.title = "Added by another annotator: only the episode's user, the study's creator or a reviewer may remove it";
      } else {
        const x = document.createElement("button");
        x.textContent = "✕";
        x.title = "Remove this tag";
        x.addEventListener("click", (e) => {
          e.stopPropagation();
          onRemove(label);
        });
        chip.append(x);
      }
      container.appendChild(chip);
    }
  }

  renderStepTags() {
    const step = this.cur;
    const locked = this.tags.locked;
    this.chips(
      el(this.root, ".sm-step-chips"),
      this.stepTags(step),
      (label) => this.change({ op: "remove", scope: "step", step, label }),
      locked.step_tags[String(step)] || [],
    );
    this.chips(
      el(this.root, ".sm-ep-chips"),
      this.tags.episode_tags,
      (label) => this.change({ op: "remove", scope: "episode", label }),
      locked.episode_tags || [],
    );
  }

  buildPalette() {
    const box = el(this.root, ".sm-palette");
    box.replaceChildren();
    this.palette.slice(0, 9).forEach((label, i) => {
      const b = document.createElement("button");
      b.className = "sm-btn";
      b.textContent = `${i + 1} ${label}`;
      b.title = `Tag the step on screen (${i + 1}); Shift+${i + 1} tags the episode`;
      b.addEventListener("click", (e) => {
        e.stopPropagation();
        this.change({ op: "add", scope: "step", step: this.cur, label });
      });
      box.appendChild(b);
    });
  }

  // The step's texts (instruction, chain-of-action-thought) with the step number, at once on every step change
  // (a few lines; the object table waits for the keys to pause), so the texts beside the frame are always the
  // step on screen's. Data from a trace: set with textContent, never markup. `data-step`: whose texts these are.
  renderStepTexts() {
    const box = el(this.root, ".sm-texts");
    const s = this.kind === "ui" ? this.steps.get(this.cur) : null;
    box.replaceChildren();
    box.dataset.step = s ? String(this.cur) : "";
    for (const t of (s && s.texts) || []) {
      const div = document.createElement("div");
      div.className = "sm-step-text";
      div.dataset.text = t.name;
      const b = document.createElement("b");
      b.textContent = `${t.label}: `;
      const span = document.createElement("span");
      span.textContent = t.text;
      div.append(b, span);
      box.appendChild(div);
    }
  }

  renderStepInfo() {
    if (this.grounding) this.grounding.load(this.cur, true);
    if (this.fields) this.fields.load(this.cur, false);
    const info = el(this.root, ".sm-stepinfo");
    const s = this.steps.get(this.cur);
    info.replaceChildren();
    const line = (label, value) => {
      const div = document.createElement("div");
      const b = document.createElement("b");
      b.textContent = `${label}: `;
      const span = document.createElement("span");
      span.textContent = value;
      div.append(b, span);
      info.appendChild(div);
    };
    const pre = (label, value) => {
      const d = document.createElement("details");
      const sum = document.createElement("summary");
      sum.textContent = label;
      const p = document.createElement("pre");
      p.textContent = value;
      d.append(sum, p);
      info.appendChild(d);
    };
    if (!s) {
      line("Step", `${this.cur} (loading data…)`);
      if (this.kind === "ui") this.renderObjects(null);
      return;
    }
    if (this.kind === "ui") {
      line("Action", s.action_text || "none");
      for (const w of s.warnings || []) line("Warning", w);
      this.renderObjects(s);
    } else {
      line("Reward", String(s.reward));
      line("Keys", (s.keys || []).join(", ") || "—");
      if (s.observation) pre("Observation", s.observation);
      pre("Action", s.action || (s.last ? "none: the final observation has no action" : "none"));
    }
    this.drawOverlay();
  }

  // ---- UI objects -------------------------------------------------------------------------------------------

  renderObjects(s) {
    const body = el(this.root, ".sm-table tbody");
    const title = el(this.root, ".sm-objects-title");
    body.replaceChildren();
    if (!s) {
      title.textContent = "Objects (loading…)";
      el(this.root, ".sm-obj-count").textContent = "";
      return;
    }
    const objs = s.objects || [];
    const more = s.objects_total > objs.length ? ` (first ${objs.length} of ${s.objects_total} shown)` : "";
    title.textContent = `${s.objects_total} objects${more}: hover or click the screenshot, or click a row`;
    this.fillTypes(objs);
    const shown = this.sortObjects(objs.filter((o) => this.objectMatches(o)));
    el(this.root, ".sm-obj-count").textContent = shown.length === objs.length ? "" : `${shown.length} of ${objs.length} shown`;
    for (const o of shown) {
      const tr = document.createElement("tr");
      tr.dataset.i = String(o.i);
      for (const c of OBJECT_COLUMNS) {
        const td = document.createElement("td");
        td.className = `sm-c-${c}`;
        td.textContent = objectCell(o, c);
        tr.appendChild(td);
      }
      tr.addEventListener("click", () => {
        this.selected = o.i;
        this.drawOverlay();
        this.markRows();
        if (!o.box) this.say(`Object #${o.i} has no box on the screen`);
      });
      body.appendChild(tr);
    }
    this.markRows();
    this.markTarget();
  }

  // The type filter offers the types of the step on screen (and keeps a chosen one the step lacks).
  fillTypes(objs) {
    const select = el(this.root, ".sm-obj-type");
    const chosen = select.value;
    const types = [...new Set(objs.map((o) => o.type))].sort();
    if (chosen && !types.includes(chosen)) types.push(chosen);
    const key = types.join("|");
    if (select.dataset.types === key) return;
    select.dataset.types = key;
    const all = document.createElement("option");
    all.value = "";
    all.textContent = "all types";
    select.replaceChildren(all);
    for (const t of types) {
      const o = document.createElement("option");
      o.value = t;
      o.textContent = t;
      select.appendChild(o);
    }
    select.value = chosen;
  }

  objectMatches(o) {
    const type = el(this.root, ".sm-obj-type").value;
    if (type && o.type !== type) return false;
    const words = el(this.root, ".sm-obj-filter").value.trim().toLowerCase();
    if (!words) return true;
    const hay = [o.text, o.desc, o.rid, o.cls, String(o.i)].join("\n").toLowerCase();
    return words.split(/\s+/).every((w) => hay.includes(w));
  }

  sortObjects(objs) {
    const { key, dir } = this.sort || { key: "i", dir: 1 };
    const value = (o) => (key === "box" ? (o.box ? o.box[1] * 1e6 + o.box[0] : Infinity) : o[key]);
    return objs.slice().sort((a, b) => {
      const x = value(a);
      const y = value(b);
      const order = typeof x === "string" || typeof y === "string"
        ? String(x ?? "").localeCompare(String(y ?? ""), undefined, { numeric: true })
        : Number(x) - Number(y);
      return (order || a.i - b.i) * dir;
    });
  }

  sortBy(key) {
    const now = this.sort || { key: "i", dir: 1 };
    this.sort = { key, dir: now.key === key ? -now.dir : 1 };
    for (const th of this.root.querySelectorAll(".sm-table th")) {
      const on = th.dataset.sort === key;
      th.setAttribute("aria-sort", on ? (this.sort.dir > 0 ? "ascending" : "descending") : "none");
    }
    this.renderObjects(this.steps.get(this.cur));
  }

  // The action's target as every highlight shows it (box, table row, grounding panel): the annotators'
  // correction when there is one (the grounding route's effective target), else the converter's choice.
  targetOf(step) {
    const s = this.steps.get(step);
    const g = this.grounding ? this.grounding.target(step) : undefined;
    if (g !== undefined) return g.index ?? null;
    return s ? s.target ?? null : null;
  }

  markTarget() {
    const s = this.steps.get(this.cur);
    const target = this.targetOf(this.cur);
    const converter = s ? s.target ?? null : null;
    for (const tr of el(this.root, ".sm-table tbody").children) {
      const i = Number(tr.dataset.i);
      tr.classList.toggle("sm-target", i === target);
      tr.classList.toggle("sm-converter", i === converter && converter !== target);
    }
  }

  markRows(scroll) {
    const active = this.selected ?? this.hovered;
    for (const tr of el(this.root, ".sm-table tbody").children) {
      const on = Number(tr.dataset.i) === active;
      tr.classList.toggle("sm-sel", on);
      if (on && scroll) this.scrollRow(tr);
    }
  }

  // The row comes into view inside the table's own box; the page itself never moves (scrollIntoView scrolled
  // the whole page to a table below the screenshot, away from the object just clicked).
  scrollRow(tr) {
    const wrap = el(this.root, ".sm-table-wrap");
    const head = el(this.root, ".sm-table thead").offsetHeight;
    const top = tr.offsetTop;
    if (top - head < wrap.scrollTop) wrap.scrollTop = top - head;
    else if (top + tr.offsetHeight > wrap.scrollTop + wrap.clientHeight) wrap.scrollTop = top + tr.offsetHeight - wrap.clientHeight;
  }

  objectAt(event) {
    const s = this.steps.get(this.cur);
    if (!s || !s.size || !this.framePainted()) return null; // nothing is picked on a placeholder
    const rect = event.currentTarget.getBoundingClientRect();
    const x = ((event.clientX - rect.left) / rect.width) * s.size[0];
    const y = ((event.clientY - rect.top) / rect.height) * s.size[1];
    let best = null;
    let bestArea = Infinity;
    const drawn = this.grounding ? this.grounding.drawn(this.cur).map((d) => ({ ...d, visible: true })) : [];
    for (const o of (s.objects || []).concat(drawn)) {
      if (!o.box || !o.visible) continue;
      const [l, t, r, b] = o.box;
      if (x < l || x > r || y < t || y > b) continue;
      const area = (r - l) * (b - t);
      if (area < bestArea) {
        best = o.i;
        bestArea = area;
      }
    }
    return best;
  }

  drawOverlay() {
    const overlay = el(this.root, ".sm-overlay");
    const canvas = el(this.root, ".sm-canvas");
    if (overlay.width !== canvas.width || overlay.height !== canvas.height) {
      overlay.width = canvas.width;
      overlay.height = canvas.height;
    }
    const ctx = overlay.getContext("2d");
    ctx.clearRect(0, 0, overlay.width, overlay.height);
    if (this.kind !== "ui") return;
    const s = this.steps.get(this.cur);
    const painted = Boolean(s && s.size && this.framePainted());
    this.drawPrediction(painted ? s : null); // hidden until this step's frame is on screen
    if (!painted) return;
    const k = overlay.width / s.size[0];
    const line = Math.max(2, Math.round(overlay.width / 300));
    const mode = el(this.root, ".sm-boxes").value;
    const rect = (o) => [o.box[0] * k, o.box[1] * k, (o.box[2] - o.box[0]) * k, (o.box[3] - o.box[1]) * k];
    ctx.lineWidth = line;
    for (const o of s.objects || []) {
      if (!o.box || !o.visible || mode === "none") continue;
      if (mode === "actionable" && !o.actionable) continue;
      if (mode === "leaves" && !o.leaf) continue;
      ctx.strokeStyle = o.actionable ? "rgb(255,140,0)" : "rgb(0,160,255)";
      ctx.strokeRect(...rect(o));
    }
    if (this.grounding) this.grounding.paint(ctx, k, line);
    const active = this.selected ?? this.hovered ?? this.targetOf(this.cur);
    const drawnNow = this.grounding ? this.grounding.drawn(this.cur) : [];
    const obj = (s.objects || []).concat(drawnNow).find((o) => o.i === active);
    if (obj && obj.box) {
      ctx.fillStyle = "rgba(255,0,80,0.22)";
      ctx.strokeStyle = "rgb(255,0,80)";
      ctx.lineWidth = line * 2;
      ctx.fillRect(...rect(obj));
      ctx.strokeRect(...rect(obj));
    }
    if (el(this.root, ".sm-grid").checked) {
      ctx.strokeStyle = "rgba(255,255,255,0.8)";
      ctx.lineWidth = line;
      for (const t of [1, 2]) {
        ctx.beginPath();
        ctx.moveTo((overlay.width * t) / 3, 0);
        ctx.lineTo((overlay.width * t) / 3, overlay.height);
        ctx.moveTo(0, (overlay.height * t) / 3);
        ctx.lineTo(overlay.width, (overlay.height * t) / 3);
        ctx.stroke();
      }
    }
    if (s.touch && el(this.root, ".sm-touch").checked) {
      const [x, y, ex, ey] = s.touch;
      const radius = Math.max(8, overlay.width / 40);
      ctx.strokeStyle = "red";
      ctx.fillStyle = "red";
      ctx.lineWidth = line * 2;
      if (ex !== null && ey !== null) {
        ctx.beginPath();
        ctx.moveTo(x * k, y * k);
        ctx.lineTo(ex * k, ey * k);
        ctx.stroke();
      }
      ctx.beginPath();
      ctx.arc(x * k, y * k, radius, 0, 2 * Math.PI);
      ctx.stroke();
      ctx.beginPath();
      ctx.arc(x * k, y * k, Math.max(2, radius / 4), 0, 2 * Math.PI);
      ctx.fill();
    }
  }

  drawPrediction(s) {
    // `s`: the step on screen (null while its frame loads). The chosen run's predicted action on this step: a second touch point (a DOM ring placed in percent of the
    // screenshot, so it stays on its pixel at any zoom) and a line of plain text saying what was predicted.
    const marker = el(this.root, ".sm-predicted");
    const note = el(this.root, ".sm-eval");
    const row = this.data.run ? this.evaluation.get(this.cur) : null;
    note.hidden = !this.data.run;
    marker.hidden = true;
    if (!this.data.run) return;
    if (!row) {
      note.textContent = `Run ${this.data.run}: this step is not scored`;
      return;
    }
    const p = row.predicted;
    const said = p ? `${p.action_type}${"x" in p ? ` (${Math.round(p.x)}, ${Math.round(p.y)})` : ""}` +
      `${p.direction ? ` ${p.direction}` : ""}${p.text !== undefined ? ` "${p.text}"` : ""}` +
      `${p.app_name !== undefined ? ` "${p.app_name}"` : ""}${p.goal_status ? ` ${p.goal_status}` : ""}` : "no prediction";
    note.textContent = `Run ${this.data.run}: predicted ${said}: ${row.matched ? "matched" : `failed (${row.reason})`}`;
    if (p && "x" in p && s && el(this.root, ".sm-touch").checked) {
      marker.style.left = `${(100 * p.x) / s.size[0]}%`;
      marker.style.top = `${(100 * p.y) / s.size[1]}%`;
      marker.classList.toggle("sm-failed", !row.matched);
      marker.title = note.textContent;
      marker.dataset.x = String(p.x);
      marker.dataset.y = String(p.y);
      marker.hidden = false;
    }
  }

  // ---- timeline ---------------------------------------------------------------------------------------------

  segments() {
    // Runs of consecutive steps carrying the same label: shown as one bar.
    const byLabel = new Map();
    for (const [step, labels] of Object.entries(this.tags.step_tags)) {
      for (const label of labels) {
        if (!byLabel.has(label)) byLabel.set(label, []);
        byLabel.get(label).push(Number(step));
      }
    }
    const runs = [];
    for (const [label, steps] of byLabel) {
      steps.sort((a, b) => a - b);
      let start = steps[0];
      let prev = steps[0];
      for (const s of steps.slice(1).concat([Infinity])) {
        if (s !== prev + 1) {
          runs.push({ label, start, end: prev });
          start = s;
        }
        prev = s;
      }
    }
    return runs;
  }

  drawTimeline() {
    const c = el(this.root, ".sm-timeline");
    const width = Math.max(100, this.timelineWidth || 600);
    if (c.width !== width) c.width = width;
    const h = c.height;
    const ctx = c.getContext("2d");
    ctx.clearRect(0, 0, width, h);
    if (this.n === 0) return;
    const xOf = (i) => (this.n <= 1 ? 0 : (i / (this.n - 1)) * (width - 1));
    const r = this.rewards;
    if (r.length) {
      let lo = Math.min(...r);
      let hi = Math.max(...r);
      if (hi === lo) {
        hi += 1;
        lo -= 1;
      }
      ctx.strokeStyle = "rgba(60,110,200,0.9)";
      ctx.lineWidth = 1;
      ctx.beginPath();
      r.forEach((v, i) => {
        const x = xOf(i);
        const y = 4 + (1 - (v - lo) / (hi - lo)) * (h - 24);
        if (i === 0) ctx.moveTo(x, y);
        else ctx.lineTo(x, y);
      });
      ctx.stroke();
    }
    const runs = this.segments();
    const lanes = [...new Set(runs.map((s) => s.label))];
    for (const run of runs) {
      const lane = lanes.indexOf(run.label) % 3;
      ctx.fillStyle = ["rgba(255,140,0,0.85)", "rgba(30,160,90,0.85)", "rgba(150,60,200,0.85)"][lane];
      const x0 = xOf(run.start);
      const x1 = Math.max(x0 + 2, xOf(run.end));
      ctx.fillRect(x0 - 1, h - 16 + lane * 5, x1 - x0 + 2, 4);
    }
    ctx.fillStyle = "rgba(255,140,0,0.9)";
    for (const step of Object.keys(this.tags.step_tags)) ctx.fillRect(xOf(Number(step)) - 1, 0, 2, 6);
    ctx.strokeStyle = "rgb(220,0,60)";
    ctx.lineWidth = 2;
    ctx.beginPath();
    ctx.moveTo(xOf(this.cur), 0);
    ctx.lineTo(xOf(this.cur), h);
    ctx.stroke();
    if (this.segStart !== null) {
      ctx.fillStyle = "rgba(220,0,60,0.15)";
      const a = xOf(Math.min(this.segStart, this.cur));
      const b = xOf(Math.max(this.segStart, this.cur));
      ctx.fillRect(a, 0, Math.max(2, b - a), h);
    }
  }

  // ---- input --------------------------------------------------------------------------------------------------

  onKey(e) {
    if (this.fields && this.fields.owns(e)) return; // the fields form has the keys while it has the focus
    if (this.disposed || !this.root.isConnected || typing(e) || this.n === 0) return;
    if (e.altKey || e.metaKey) return;
    const digit = /^(Digit|Numpad)([1-9])$/.exec(e.code || "");
    let handled = true;
    if (e.ctrlKey && this.labels) {
      handled = false;
    } else if (e.ctrlKey) {
      if (e.code === "KeyZ" && e.shiftKey) this.undoRedo(true);
      else if (e.code === "KeyZ") this.undoRedo(false);
      else if (e.code === "KeyY") this.undoRedo(true);
      else handled = false;
    } else if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
      // Every press is one step; holding the key repeats on our own clock (the system's repeat events are
      // ignored, so a held key moves at the same rate on every machine and in automated browsers alike).
      if (!e.repeat) this.arrow(e.key === "ArrowRight" ? 1 : -1, e.shiftKey ? 10 : 1, e.key);
    } else if (e.key === "Home") this.go(0);
    else if (e.key === "End") this.go(this.n - 1);
    else if (e.key === " " || e.code === "Space") this.togglePlay();
    else if (e.key === "]" || e.key === "[") this.jumpTagged(e.key === "]" ? 1 : -1);
    else if (e.code === "KeyF" && !e.shiftKey && this.fields) this.fields.focus();
    else if (digit) {
      const label = this.palette[Number(digit[2]) - 1];
      if (label === undefined) this.say(`No palette tag ${digit[2]} in this study (Studies page)`, true);
      else if (e.shiftKey && this.labels) handled = false;
      else if (e.shiftKey) this.change({ op: "add", scope: "episode", label });
      else this.change({ op: "add", scope: "step", step: this.cur, label });
    } else handled = false;
    if (handled) {
      e.preventDefault();
      e.stopPropagation();
    }
  }

  arrow(dir, size, key) {
    this.stopHold();
    this.go(this.cur + dir * size);
    this.held = key;
    this.holdTimer = setTimeout(() => {
      this.holdTimer = setInterval(() => {
        if (this.held !== key || this.disposed) return this.stopHold();
        if ((dir > 0 && this.cur >= this.n - 1) || (dir < 0 && this.cur <= 0)) return;
        this.go(this.cur + dir * size);
      }, HOLD_EVERY_MS);
    }, HOLD_DELAY_MS);
  }

  stopHold() {
    clearTimeout(this.holdTimer);
    clearInterval(this.holdTimer);
    this.holdTimer = null;
    this.held = null;
  }

  onClick(e) {
    const b = e.target.closest ? e.target.closest("[data-act]") : null;
    if (!b) return;
    const act = b.dataset.act;
    if (act.startsWith("g-")) {
      if (this.grounding) this.grounding.onAct(act);
      return;
    }
    if (act === "first") this.go(0);
    else if (act === "prev") this.go(this.cur - 1);
    else if (act === "next") this.go(this.cur + 1);
    else if (act === "last") this.go(this.n - 1);
    else if (act === "play") this.togglePlay();
    else if (act === "tag-step") this.tagFromInput("step");
    else if (act === "tag-ep") this.tagFromInput("episode");
    else if (act === "undo") this.undoRedo(false);
    else if (act === "redo") this.undoRedo(true);
    else if (act === "zoom") this.zoom();
    else if (act === "seg-start") {
      this.segStart = this.cur;
      this.renderHeader();
      this.drawTimeline();
    } else if (act === "seg-tag") this.tagSegment();
  }

  tagFromInput(scope) {
    const input = el(this.root, scope === "step" ? ".sm-step-input" : ".sm-ep-input");
    const label = input.value.trim();
    if (!label) return;
    input.value = "";
    if (scope === "step") this.change({ op: "add", scope: "step", step: this.cur, label });
    else this.change({ op: "add", scope: "episode", label });
  }

  tagSegment() {
    const input = el(this.root, ".sm-step-input");
    const label = input.value.trim();
    if (!label || this.segStart === null) {
      this.say("Type the segment's tag in the step tag box first", true);
      return;
    }
    input.value = "";
    const [a, b] = [Math.min(this.segStart, this.cur), Math.max(this.segStart, this.cur)];
    this.segStart = null;
    this.change({ op: "add", scope: "segment", step: a, end: b, label });
    this.renderHeader();
  }

  jumpTagged(dir) {
    const tagged = Object.keys(this.tags.step_tags).map(Number).sort((a, b) => a - b);
    const next = dir > 0 ? tagged.find((s) => s > this.cur) : tagged.reverse().find((s) => s < this.cur);
    if (next === undefined) this.say(dir > 0 ? "No tagged step after this one" : "No tagged step before this one");
    else this.go(next);
  }

  togglePlay() {
    this.playing = !this.playing;
    if (this.playing) {
      if (this.cur >= this.n - 1) this.show(0);
      this.dir = 1;
      this.playFrom = performance.now();
      this.playBase = this.cur;
      requestAnimationFrame((t) => this.tick(t));
    } else {
      this.scheduleReport();
    }
    this.renderHeader();
  }

  tick(now) {
    if (!this.playing || this.disposed) return;
    const interval = 1000 / this.fps;
    // Advance on the clock: step k is due at playFrom + k/fps. A step whose frame is not loaded yet is waited
    // for (never skipped), and the clock restarts from it so the rate does not jump to catch up.
    const due = this.playBase + Math.floor((now - this.playFrom) / interval);
    if (due > this.cur) {
      const next = this.cur + 1;
      if (next >= this.n) {
        this.playing = false;
        this.renderHeader();
        this.scheduleReport();
        return;
      }
      if (this.frames.has(next) || this.failed.has(next)) {
        this.show(next);
        if (due > next + 1) {
          this.playFrom = now;
          this.playBase = next;
        }
      } else {
        this.loadFrame(next);
        this.playFrom = now - interval;
        this.playBase = this.cur;
      }
    }
    requestAnimationFrame((t) => this.tick(t));
  }

  // ---- changes ------------------------------------------------------------------------------------------------

  say(message, error) {
    const box = el(this.root, ".sm-message");
    box.textContent = message;
    box.classList.toggle("sm-err", !!error);
  }

  applyTags(body) {
    const before = this.tags.state;
    this.tags = {
      episode_tags: body.episode_tags || [],
      step_tags: body.step_tags || {},
      state: body.state || "",
      version: body.version || "",
      locked: { episode_tags: [], step_tags: {}, ...(body.locked || {}) },
    };
    this.renderStepTags();
    this.drawTimeline();
    if (before && before !== this.tags.state) this.setTriggerValue("changed", this.tags.version);
  }

  change(request) {
    // Optimistic: shown at once, then replaced by what the store says.
    if (request.scope === "step") {
      const key = String(request.step);
      const now = this.tags.step_tags[key] || [];
      if (request.op === "add" && !now.includes(request.label)) this.tags.step_tags[key] = now.concat([request.label]);
      if (request.op === "remove") this.tags.step_tags[key] = now.filter((l) => l !== request.label);
      if (!this.tags.step_tags[key].length) delete this.tags.step_tags[key];
      this.renderStepTags();
      this.drawTimeline();
    }
    this.send("tags", request);
  }

  undoRedo(redo) {
    this.send(redo ? "redo" : "undo", {});
  }

  send(path, body) {
    const url = path === "tags" ? this.tagsBase : `${this.base}/${path}`;
    this.enqueue(
      url,
      body,
      (reply) => {
        this.applyTags(reply);
        this.say(reply.message || "");
        if (path !== "tags" && this.grounding) this.grounding.load(this.cur, true);
        if (path !== "tags" && this.fields) this.fields.reload();
        if (path !== "tags") this.setTriggerValue("changed", reply.version || "");
      },
      (err) => {
        this.say(`Not saved: ${err.message}`, true);
        return this.refresh();
      },
    );
  }

  // Every change (tags, undo/redo, grounding annotations) goes through here: sent one after another in the
  // order made, each with `keepalive`, so a request under way still reaches the server when the tab reloads or
  // closes; the changes still waiting their turn are sent at once on `pagehide` (`flush`). Nothing a person
  // made is lost because the tab went away while an earlier change was on its way.
  enqueue(url, body, onReply, onError) {
    const item = { url, body: JSON.stringify(body) };
    this.outbox.push(item);
    this.pending++;
    this.queue = this.queue
      .then(async () => {
        const at = this.outbox.indexOf(item);
        if (at < 0) return; // sent by flush() as the page went away
        this.outbox.splice(at, 1);
        const response = await this.postChange(item);
        const reply = await response.json().catch(() => ({}));
        if (!response.ok) {
          const err = new Error(reply.error || `${response.status} ${response.statusText}`);
          err.status = response.status; // 409: the store holds something else by now
          throw err;
        }
        onReply(reply);
      })
      .catch((err) => onError(err))
      .finally(() => {
        this.pending--;
        this.releaseOutbox();
      });
  }

  postChange(item) {
    return fetch(item.url, {
      method: "POST",
      headers: this.headers,
      body: item.body,
      credentials: "same-origin",
      keepalive: true,
    });
  }

  flush() {
    // The page is going away: the waiting changes go now, in the order made, kept alive past the unload.
    for (const item of this.outbox.splice(0)) this.postChange(item).catch(() => {});
  }

  async refresh() {
    try {
      this.applyTags(await this.getJSON(this.tagsBase));
    } catch (err) {
      this.say(`Could not read the tags: ${err.message}`, true);
    }
  }

  async poll() {
    if (this.pending || this.disposed || document.hidden) return;
    try {
      const body = await this.getJSON(this.tagsBase);
      if (!this.pending && body.version !== this.tags.version) this.applyTags(body);
    } catch (err) {
      // The server may be restarting: say nothing until it answers again.
    }
  }

  writeUrl() {
    // The URL names the step on screen (a reload comes back to it), at most every 200 ms: browsers throttle
    // pages that rewrite their history faster.
    if (this.urlTimer) return;
    this.urlTimer = setTimeout(() => {
      this.urlTimer = null;
      if (this.disposed) return;
      const url = new URL(window.location.href);
      if (url.searchParams.get("step") === String(this.cur)) return;
      url.searchParams.set("step", String(this.cur));
      window.history.replaceState(window.history.state, "", url);
    }, 200);
  }

  scheduleReport() {
    this.writeUrl();
    clearTimeout(this.reportTimer);
    if (this.playing) return;
    this.reportTimer = setTimeout(() => {
      if (this.playing || this.disposed || this.reported === this.cur) return;
      this.reported = this.cur;
      this.setStateValue("step", this.cur);
    }, STATE_DEBOUNCE_MS);
  }
}

export default function (component) {
  const { data, parentElement, setStateValue, setTriggerValue } = component;
  const root = parentElement;
  const id = `${data.ref}|${data.token}|${JSON.stringify(data.palette || [])}|${data.run || ""}`;
  const previous = players.get(root);
  let player;
  if (previous && previous.id === id && !previous.player.disposed) {
    // The same episode again after a Streamlit rerun: keep the player (and its step, its playback) as it is.
    clearTimeout(previous.disposeTimer);
    player = previous.player;
    player.setStateValue = setStateValue;
    player.setTriggerValue = setTriggerValue;
  } else {
    if (previous) previous.player.dispose();
    player = new Player(root, data, setStateValue, setTriggerValue);
    if (previous && previous.player.data.ref === data.ref) player.data = { ...data, start: previous.player.cur };
    players.set(root, { id, player });
    player.start().catch((err) => player.say(`Cannot open the episode: ${err.message}`, true));
  }
  return () => {
    // Streamlit calls this before calling us again with new data, and when the player leaves the page: dispose
    // only if no new call for the same episode follows at once.
    const entry = players.get(root);
    if (!entry || entry.player !== player) return;
    entry.disposeTimer = setTimeout(() => {
      if (players.get(root) === entry) players.delete(root);
      player.dispose();
    }, 0);
  };
}
