// The stepmark live recorder: a WebSocket to the annotator's own server (/api/record/ws) that steps the
// environment. The browser sends key-down/key-up state and the Gamepad API's buttons/axes as they happen and
// draws the JPEG frames that come back, acknowledging each one (the server then sends the newest frame: a slow
// browser misses frames, never inputs). Esc pauses and resumes (Shift+Esc in games that use Esc), Enter starts the next episode, the save/reject
// decision at the end of an episode is made here. Text from the server goes into the page with textContent only.

const recorders = (window.__stepmarkRecorders = window.__stepmarkRecorders || new Map());
const MODIFIERS = new Set(["Shift", "Control", "Alt", "Meta"]);
const ALWAYS_CAPTURED = new Set(["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", " "]);
const AXIS_NOISE = 0.05; // gamepad values below this are sent as 0 (idle sticks drift a little)
const AXIS_PRESS = 0.5; // a stick past this counts as a press in sync mode (as keymaps.DIGITAL_THRESHOLD)
const STATUS = {
  connecting: "Connecting…",
  ready: "Press Enter (or Next episode) to start the next episode",
  running: "Recording",
  paused: "Paused: Esc or Enter resumes",
  pausedGameEsc: "Paused: Esc or Enter resumes (Shift+Esc pauses: Esc goes to the game)",
  ended: "The episode has ended: save or reject it",
  closed: "Recording closed",
};

class LiveRecorder {
  constructor(root, data, setTriggerValue) {
    this.root = root;
    this.data = data;
    this.setTriggerValue = setTriggerValue;
    this.state = "connecting";
    this.sync = true;
    this.keyMap = {};
    this.held = new Map(); // KeyboardEvent.code -> key, so a key released after Shift still lets go
    this.pad = null; // last gamepad state sent (JSON text)
    this.padPressed = new Set();
    this.shown = 0;
    this.lastDrawn = 0;
    this.listeners = [];
    this.disposed = false;
    this.raf = 0;
    this.ws = null;
  }

  // ---- set-up ---------------------------------------------------------------------------------------------

  start() {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${proto}://${location.host}/api/record/ws`);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onopen = () => {
      const d = this.data;
      this.send({ t: "hello", token: d.token, study: d.study, env: d.env, quality: d.quality, fps: d.fps,
        camera: d.camera || 0 });
    };
    ws.onmessage = (m) => (typeof m.data === "string" ? this.onEvent(JSON.parse(m.data)) : this.onFrame(m.data));
    ws.onclose = (e) => {
      if (this.disposed) return;
      if (this.state !== "closed") {
        this.setStatus("closed");
        this.say(`Connection closed (${e.code}${e.reason ? ": " + e.reason : ""}). The steps recorded so far ` +
          "are kept as an abandoned episode; reload the page to record again.", true);
      }
      cancelAnimationFrame(this.raf);
    };
    this.bind();
    this.raf = requestAnimationFrame(() => this.pollGamepad());
  }

  on(target, type, fn, opts) {
    target.addEventListener(type, fn, opts);
    this.listeners.push([target, type, fn, opts]);
  }

  bind() {
    const r = this.root;
    this.on(document, "keydown", (e) => this.onKeyDown(e), true);
    this.on(document, "keyup", (e) => this.onKeyUp(e), true);
    this.on(window, "blur", () => this.releaseAll());
    this.on(el(r, ".lr-recorder"), "click", (e) => {
      const act = e.target && e.target.closest ? e.target.closest("[data-act]") : null;
      if (act) this.onButton(act.getAttribute("data-act"));
    });
  }

  dispose() {
    this.disposed = true;
    cancelAnimationFrame(this.raf);
    for (const [target, type, fn, opts] of this.listeners) target.removeEventListener(type, fn, opts);
    this.listeners = [];
    if (this.ws && this.ws.readyState <= 1) this.ws.close(1000, "recorder left the page");
  }

  update(data) {
    const old = this.data;
    this.data = data;
    if (data.fps && data.fps !== old.fps) this.send({ t: "fps", fps: data.fps });
    if (data.quality && data.quality !== old.quality) this.send({ t: "quality", quality: data.quality });
    if ((data.camera || 0) !== (old.camera || 0)) this.send({ t: "camera", index: data.camera || 0 });
  }

  send(message) {
    if (this.ws && this.ws.readyState === 1) this.ws.send(JSON.stringify(message));
  }

  // ---- from the server ------------------------------------------------------------------------------------

  onFrame(buffer) {
    const view = new DataView(buffer);
    const size = view.getUint32(0);
    const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 4, size)));
    const blob = new Blob([new Uint8Array(buffer, 4 + size)], { type: "image/jpeg" });
    createImageBitmap(blob)
      .then((bitmap) => {
        if (this.disposed || header.n < this.lastDrawn) return;
        this.lastDrawn = header.n;
        const canvas = el(this.root, ".lr-canvas");
        if (canvas.width !== bitmap.width || canvas.height !== bitmap.height) {
          canvas.width = bitmap.width;
          canvas.height = bitmap.height;
        }
        canvas.getContext("2d").drawImage(bitmap, 0, 0);
        bitmap.close();
        this.shown += 1;
        const frame = el(this.root, ".lr-frame");
        frame.setAttribute("data-step", String(header.step));
        frame.setAttribute("data-episode", String(header.episode));
        frame.setAttribute("data-shown", String(this.shown));
        const reward = header.reward === undefined ? "" : ` · reward ${header.reward}`;
        el(this.root, ".lr-info").textContent = `episode ${header.episode} · step ${header.step}${reward}`;
      })
      .catch(() => {})
      .finally(() => this.send({ t: "ack", n: header.n }));
  }

  onEvent(event) {
    if (event.t === "state") {
      if (event.keys && JSON.stringify(event.keys) !== JSON.stringify(this.keyMap)) this.showKeys(event.keys);
      if (event.sync !== undefined) this.sync = event.sync;
      this.setStatus(event.state);
    } else if (event.t === "saved") {
      this.say(`Episode ${event.episode_id} saved as ${event.status || "rejected"} ` +
        `(${event.steps} steps, return ${event.return}). Press Enter for the next one.`);
    } else if (event.t === "abandoned") {
      this.say(event.episode_id ? `Episode ${event.episode_id} (${event.steps} steps) kept as abandoned.`
        : "The empty episode was dropped.");
    } else if (event.t === "stopped") {
      this.say(event.episode_id ? `Stopped; episode ${event.episode_id} kept as cancelled.` : "Stopped.");
      this.setTriggerValue("stopped", event.episode_id || "-");
    } else if (event.t === "error") {
      this.say(event.message, true);
    }
  }

  setStatus(state) {
    this.state = state;
    const status = (state === "paused" && "Escape" in this.keyMap ? STATUS.pausedGameEsc : STATUS[state]) || state;
    el(this.root, ".lr-status").textContent = this.sync || state !== "running" ? status : `${status} (clock on)`;
    el(this.root, ".lr-frame").setAttribute("data-state", state);
    el(this.root, ".lr-save").hidden = state !== "ended";
    el(this.root, "[data-act=next]").hidden = state !== "ready";
    el(this.root, "[data-act=pause]").textContent = state === "paused" ? "Resume" : "Pause";
    el(this.root, "[data-act=save-now]").hidden = !(state === "running" || state === "paused");
    if (state !== "running") this.releaseAll(false);
  }

  showKeys(keys) {
    this.keyMap = keys;
    const pause = el(this.root, "[data-act=pause]");
    pause.title = "Escape" in keys ? "Pause / resume (Shift+Esc; Esc goes to the game)" : "Pause / resume (Esc)";
    const table = el(this.root, ".lr-keys");
    table.textContent = "";
    for (const [key, meaning] of Object.entries(keys)) {
      const row = table.insertRow();
      row.insertCell().textContent = key === " " ? "Space" : key;
      row.insertCell().textContent = meaning;
    }
  }

  say(text, error = false) {
    const box = el(this.root, ".lr-message");
    box.textContent = text;
    box.classList.toggle("lr-error", !!error);
  }

  // ---- input ----------------------------------------------------------------------------------------------

  keys() {
    return [...new Set(this.held.values())];
  }

  onKeyDown(e) {
    if (this.disposed || typing(e) || this.state === "closed" || this.state === "connecting") return;
    // Esc pauses and resumes, unless the game itself uses Esc (NetHack: cancel a prompt) and the recording is
    // running: then Esc goes to the game and Shift+Esc pauses.
    const gameEsc = "Escape" in this.keyMap && this.state === "running" && !e.shiftKey;
    if (e.key === "Escape" && !gameEsc) {
      e.preventDefault();
      if (this.state === "running") this.send({ t: "pause", paused: true });
      else if (this.state === "paused") this.send({ t: "pause", paused: false });
      return;
    }
    if (e.key === "Enter" && this.state !== "running") {
      e.preventDefault();
      if (this.state === "paused" || this.state === "ready") this.send({ t: "enter" });
      return;
    }
    if (this.state !== "running") return;
    if (ALWAYS_CAPTURED.has(e.key) || e.key in this.keyMap || e.key === "Enter") e.preventDefault();
    if (e.ctrlKey && (e.key === "r" || e.key === "w")) return; // leave the browser's reload / close alone
    const fresh = !this.held.has(e.code);
    this.held.set(e.code, e.key);
    if (MODIFIERS.has(e.key)) {
      if (!this.sync) this.send({ t: "hold", keys: this.keys(), gamepad: this.padState() });
      return;
    }
    if (this.sync) {
      this.send({ t: "press", keys: this.keys(), gamepad: this.padState() }); // every press (and repeat) acts
    } else if (fresh) {
      this.send({ t: "press", keys: this.keys(), gamepad: this.padState() }); // acts on the next frame at least
    }
  }

  onKeyUp(e) {
    if (!this.held.has(e.code)) return;
    this.held.delete(e.code);
    if (!this.sync && this.state === "running") this.send({ t: "hold", keys: this.keys(), gamepad: this.padState() });
  }

  releaseAll(notify = true) {
    if (this.held.size === 0) return;
    this.held.clear();
    if (notify && !this.sync && this.state === "running") this.send({ t: "hold", keys: [], gamepad: null });
  }

  onButton(act) {
    if (act === "pause") this.send({ t: "pause", paused: this.state !== "paused" });
    else if (act === "next") this.send({ t: "enter" });
    else if (act === "save" || act === "reject") {
      this.send({ t: "save", accept: act === "save", completed: el(this.root, ".lr-completed").checked });
    } else if (act === "save-now") this.send({ t: "end" }); else if (act === "stop") this.send({ t: "stop" });
  }

  // ---- gamepad (Gamepad API, polled once per animation frame) ----------------------------------------------

  currentPad() {
    const pads = navigator.getGamepads ? navigator.getGamepads() : [];
    for (const pad of pads || []) if (pad && pad.connected !== false) return pad;
    return null;
  }

  padState() {
    const pad = this.currentPad();
    if (!pad) return null;
    const buttons = {};
    pad.buttons.forEach((b, i) => {
      const value = typeof b === "number" ? b : b.value;
      const pressed = typeof b === "number" ? b >= 0.5 : b.pressed;
      if (pressed || value > AXIS_NOISE) buttons[i] = [!!pressed, Math.round(value * 100) / 100];
    });
    const axes = {};
    pad.axes.forEach((v, i) => {
      if (Math.abs(v) > AXIS_NOISE) axes[i] = Math.round(v * 100) / 100;
    });
    return { id: String(pad.id || "").slice(0, 200), buttons, axes };
  }

  pollGamepad() {
    if (this.disposed) return;
    this.raf = requestAnimationFrame(() => this.pollGamepad());
    const state = this.padState();
    const text = state ? JSON.stringify(state) : null;
    if (text === this.pad) return;
    this.pad = text;
    const pressed = new Set();
    if (state) {
      for (const [i, b] of Object.entries(state.buttons)) if (b[0] || b[1] >= AXIS_PRESS) pressed.add(`b${i}`);
      for (const [i, v] of Object.entries(state.axes)) if (Math.abs(v) >= AXIS_PRESS) pressed.add(`a${i}${v > 0 ? "+" : "-"}`);
      el(this.root, ".lr-gamepad").textContent = `Gamepad: ${state.id}`;
    }
    const fresh = [...pressed].some((p) => !this.padPressed.has(p));
    this.padPressed = pressed;
    if (this.state !== "running") return;
    if (this.sync) {
      if (fresh) this.send({ t: "press", keys: this.keys(), gamepad: state }); // a button or stick going down
    } else {
      this.send({ t: fresh ? "press" : "hold", keys: this.keys(), gamepad: state });
    }
  }
}

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  const root = parentElement;
  const previous = recorders.get(root);
  let recorder;
  if (previous && previous.id === data.session && !previous.recorder.disposed) {
    // The same recording after a Streamlit rerun: keep the connection, pass on changed settings.
    clearTimeout(previous.disposeTimer);
    recorder = previous.recorder;
    recorder.setTriggerValue = setTriggerValue;
    recorder.update(data);
  } else {
    if (previous) previous.recorder.dispose();
    recorder = new LiveRecorder(root, data, setTriggerValue);
    recorders.set(root, { id: data.session, recorder });
    recorder.start();
  }
  return () => {
    // Called when the recorder leaves the page (and may be before a new call with new data): close the
    // connection only if no call for the same recording follows at once.
    const entry = recorders.get(root);
    if (!entry || entry.recorder !== recorder) return;
    entry.disposeTimer = setTimeout(() => {
      if (recorders.get(root) === entry) recorders.delete(root);
      recorder.dispose();
    }, 0);
  };
}
