// One WebSocket to the gateway's /ws in one dialect, reconnecting with backoff after it drops.
//
// The token (if the page has one) travels as the subprotocol entry `bearer.<token>`, the way the gateway accepts
// it from browsers; without one, the connection relies on an auth proxy in front that adds the header.
// `request()` resolves with the answer to one request: matched by `requestId` in the lifecycle dialect and by
// the envelope `id` in the task dialect; an error frame rejects it, and so does a dropped connection.

export const LIFECYCLE = "agent-lifecycle.v1";
export const TASK = "task-session.v1";

const MAX_BACKOFF_MS = 10_000;
// The gateway ended the connection because the token was revoked or expired (4001), or access it relied on was
// withdrawn (4003): connecting again with the same token would only be refused, so the page signs in again.
const ENDED_CODES = new Set([4001, 4003]);

export class GatewayError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export class GatewaySocket {
  constructor({ dialect, token, onFrame, onState }) {
    this.dialect = dialect;
    this.token = token;
    this.onFrame = onFrame;
    this.onState = onState;
    this.ws = null;
    this.attempt = 0;
    this.counter = 0;
    this.pending = new Map();
    this.stopped = true;
    this.timer = null;
  }

  start() {
    this.stopped = false;
    this.connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    const ws = this.ws;
    this.ws = null;
    this.failPending("the page closed this connection");
    if (ws) ws.close(1000);
  }

  get open() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  connect() {
    const url = new URL("/ws", window.location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    const protocols = [this.dialect];
    if (this.token) protocols.push(`bearer.${this.token}`);
    const ws = new WebSocket(url, protocols);
    this.ws = ws;
    this.onState({ state: "connecting", attempt: this.attempt });
    ws.addEventListener("open", () => {
      if (this.ws !== ws) return;
      this.attempt = 0;
      this.onState({ state: "open" });
    });
    ws.addEventListener("message", (event) => {
      if (this.ws !== ws) return;
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      this.settle(frame);
      this.onFrame(frame);
    });
    ws.addEventListener("close", (event) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.failPending("the connection to the gateway was lost");
      if (this.stopped) return;
      if (ENDED_CODES.has(event.code)) {
        this.stopped = true;
        this.onState({ state: "ended", code: event.code, reason: event.reason });
        return;
      }
      const delay = Math.min(MAX_BACKOFF_MS, 500 * 2 ** this.attempt);
      this.attempt += 1;
      this.onState({ state: "lost", delay, code: event.code });
      this.timer = setTimeout(() => this.connect(), delay);
    });
  }

  send(frame) {
    if (!this.open) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  request(frame) {
    const key = `c${++this.counter}`;
    const message =
      this.dialect === TASK
        ? { id: key, type: "request", timestamp: new Date().toISOString(), ...frame }
        : { ...frame, requestId: key };
    return new Promise((resolve, reject) => {
      if (!this.send(message)) {
        reject(new GatewayError("disconnected", "not connected to the gateway"));
        return;
      }
      this.pending.set(key, { resolve, reject });
    });
  }

  settle(frame) {
    const key = this.dialect === TASK ? answerIdOfTask(frame) : frame.payload?.requestId;
    const waiting = key ? this.pending.get(key) : undefined;
    if (!waiting) return;
    this.pending.delete(key);
    if (frame.type === "error") {
      const { code, message } = frame.payload;
      waiting.reject(new GatewayError(code, message));
    } else {
      waiting.resolve(frame.payload);
    }
  }

  failPending(message) {
    for (const { reject } of this.pending.values()) reject(new GatewayError("disconnected", message));
    this.pending.clear();
  }
}

function answerIdOfTask(frame) {
  return frame.type === "response" || frame.type === "error" ? frame.id : undefined;
}
