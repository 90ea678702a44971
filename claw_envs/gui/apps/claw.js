// The bridge between a claw GUI app and the environment (claw_envs.gui):
// claw.say(text) posts a message to the agent (it becomes the step's directive),
// claw.params holds the query-string parameters, and each app defines window.clawState()
// returning its real state as JSON, which the task's check reads.
window.claw = {
  messages: [],
  say(text) { this.messages.push(String(text)); },
  take() { const out = this.messages; this.messages = []; return out; },
  params: Object.fromEntries(new URLSearchParams(location.search)),
};
