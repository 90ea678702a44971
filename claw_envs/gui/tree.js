// Describe the page for claw's GUI env: give every element worth naming a stable data-claw-id and
// return one line per element ([id] role "name" state), indented under its parent, plus each box, and the
// messages the app posted with claw.say since the last call.
() => {
  const TAG_ROLES = { A: "link", BUTTON: "button", SELECT: "combobox", TEXTAREA: "textbox", LI: "listitem",
    TD: "cell", TH: "columnheader", P: "paragraph", LABEL: "label", H1: "heading", H2: "heading", H3: "heading",
    H4: "heading", IMG: "img", OPTION: "option" };
  const INPUT_ROLES = { checkbox: "checkbox", radio: "radio", submit: "button", button: "button", reset: "button",
    number: "spinbutton", search: "searchbox", range: "slider" };
  const CONTROLS = "input, select, textarea, button";
  const clip = (s, n = 80) => { s = String(s).replace(/\s+/g, " ").trim(); return s.length > n ? s.slice(0, n - 1) + "…" : s; };
  const quote = (s) => JSON.stringify(s);
  if (!window.__clawNext) window.__clawNext = 1;
  const lines = [], elements = {};
  const visible = (el) => {
    const style = getComputedStyle(el);
    if (style.display === "none" || style.visibility === "hidden") return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const roleOf = (el) => {
    if (el.getAttribute("role")) return el.getAttribute("role");
    if (el.tagName === "INPUT") return INPUT_ROLES[(el.type || "text").toLowerCase()] || "textbox";
    return TAG_ROLES[el.tagName] || (el.hasAttribute("aria-label") ? "region" : "text");
  };
  const ownText = (el) => clip(Array.from(el.childNodes).filter((n) => n.nodeType === 3).map((n) => n.textContent).join(" "));
  const labelText = (label) => {
    const copy = label.cloneNode(true);
    copy.querySelectorAll(CONTROLS).forEach((c) => c.remove());
    return clip(copy.textContent);
  };
  const nameOf = (el) => {
    if (el.getAttribute("aria-label")) return clip(el.getAttribute("aria-label"));
    if (el.labels && el.labels.length) return labelText(el.labels[0]);
    if (el.placeholder) return clip(el.placeholder);
    if (el.title) return clip(el.title);
    if (el.alt) return clip(el.alt);
    if (["A", "BUTTON", "OPTION"].includes(el.tagName) || el.getAttribute("role")) return clip(el.innerText || el.textContent);
    return ownText(el);
  };
  const stateOf = (el, role) => {
    const out = [];
    if (el.tagName === "SELECT") {
      out.push(`value=${quote(el.value)}`);
      out.push(`options: ${Array.from(el.options).map((o) => o.text).join(" | ")}`);
    } else if (role === "checkbox" || role === "radio" || role === "switch") {
      out.push(el.checked ? "checked" : "unchecked");
    } else if ("value" in el && ["INPUT", "TEXTAREA"].includes(el.tagName)) {
      out.push(`value=${quote(el.type === "password" ? "•".repeat(el.value.length) : clip(el.value, 60))}`);
    }
    if (el.disabled) out.push("disabled");
    return out.length ? " " + out.join(" ") : "";
  };
  const walk = (el, depth) => {
    if (!visible(el)) return;
    const tag = el.tagName;
    const control = el.matches(CONTROLS) || tag === "A";
    const holdsControl = tag === "LABEL" && el.querySelector(CONTROLS);
    const named = control || el.getAttribute("role") || el.hasAttribute("aria-label") || /^H[1-4]$/.test(tag);
    const text = ownText(el);
    let inner = depth;
    if ((named || text) && !holdsControl) {
      if (!el.dataset.clawId) el.dataset.clawId = String(window.__clawNext++);
      const id = el.dataset.clawId, role = roleOf(el), name = nameOf(el) || text;
      const r = el.getBoundingClientRect();
      lines.push(`${"  ".repeat(depth)}[${id}] ${role} ${quote(name)}${stateOf(el, role)}`);
      elements[id] = [role, name, r.x, r.y, r.width, r.height];
      inner = depth + 1;
      if (control || tag === "SELECT") return;
    }
    for (const child of el.children) walk(child, inner);
  };
  walk(document.body, 0);
  const messages = window.claw && window.claw.take ? window.claw.take() : [];
  return { lines, elements, title: document.title, messages, ready: document.readyState };
}
