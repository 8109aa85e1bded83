// A session's conversation folded from ACP `session/update` notifications: streamed chunks of one speaker join
// into one entry, tool calls are one entry each whose status follows their updates. No DOM here.

const CHUNKS = {
  user_message_chunk: "user",
  agent_message_chunk: "agent",
  agent_thought_chunk: "thought",
};

export function textOf(content) {
  if (!content) return "";
  if (Array.isArray(content)) return content.map(textOf).join("");
  if (content.type === "text") return typeof content.text === "string" ? content.text : "";
  if (content.type === "content") return textOf(content.content);
  if (content.type === "diff") return `diff of ${content.path}`;
  if (content.type === "terminal") return `terminal ${content.terminalId}`;
  return "";
}

export class Transcript {
  constructor() {
    this.entries = [];
    this.tools = new Map();
  }

  // Applies one update; returns the entry it added or changed, or null for updates it does not show.
  apply(update) {
    const kind = update?.sessionUpdate;
    const speaker = CHUNKS[kind];
    if (speaker) {
      const text = textOf(update.content);
      const last = this.entries.at(-1);
      if (last && last.kind === speaker) {
        last.text += text;
        return last;
      }
      return this.add({ kind: speaker, text });
    }
    if (kind === "tool_call" || kind === "tool_call_update") {
      let entry = this.tools.get(update.toolCallId);
      if (!entry) {
        entry = this.add({ kind: "tool", text: "", title: update.toolCallId, status: "pending" });
        this.tools.set(update.toolCallId, entry);
      }
      if (update.title) entry.title = update.title;
      if (update.status) entry.status = update.status;
      const text = textOf(update.content);
      if (text) entry.text = text;
      return entry;
    }
    if (kind === "current_mode_update") {
      return this.add({ kind: "note", text: `Mode: ${update.currentModeId ?? update.modeId}` });
    }
    if (kind === "plan") {
      const lines = (update.entries || []).map((e) => `${e.status === "completed" ? "done" : e.status}: ${e.content}`);
      return this.add({ kind: "plan", text: lines.join("\n") });
    }
    return null;
  }

  add(entry) {
    entry.index = this.entries.length;
    this.entries.push(entry);
    return entry;
  }
}
