// Haul's page: the daemon's download list, live from its event stream, built only on the public API.
// Everything a server or user controls (names, URLs, messages) goes into the page as text (textContent), never as
// HTML. Rows are drawn only for the part of the list in view, from a pool of row elements: a row taken for another
// download is rebound in full (id, name, progress, buttons) in the same frame, so it never shows what it showed
// before.

const api = "/api/v1";
const $ = (id) => document.getElementById(id);

const state = {
  downloads: new Map(), // id -> Download
  order: [], // ids, in the daemon's order; new ones at the end
  filter: "all",
  query: "",
  stats: null,
  settings: null,
  events: null,
  renderQueued: false,
  rowHeight: 84,
  pool: [],
  speeds: [], // total bytes a second, one a second, oldest first (the last ten minutes)
  orderDirty: false, // the order is re-sorted by position after an added, changed or removed event
  selected: new Set(),
  anchor: null, // the last row clicked for selection (shift-click selects from it)
  detailID: null,
  detailSpeeds: [],
  snapshotSeen: false,
  firstRenderMarked: false,
};

const filters = {
  all: () => true,
  active: (d) => d.state === "running" || d.state === "waitingForNetwork",
  waiting: (d) => d.state === "queued",
  paused: (d) => d.state === "paused",
  completed: (d) => d.state === "completed",
  failed: (d) => d.state === "failed" || d.state === "cancelled",
};

// MARK: Formatting

function bytes(n) {
  if (n == null) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + " " + units[i];
}

function duration(seconds) {
  if (seconds == null || !isFinite(seconds)) return "";
  const s = Math.round(seconds);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

const stateNames = {
  queued: "Waiting", running: "Downloading", paused: "Paused", waitingForNetwork: "Waiting for network",
  completed: "Completed", failed: "Failed", cancelled: "Cancelled",
};

function nameOf(d) {
  const path = d.path || "";
  if (path) return path.slice(path.lastIndexOf("/") + 1);
  try {
    const url = new URL(d.url);
    const last = decodeURIComponent(url.pathname.slice(url.pathname.lastIndexOf("/") + 1));
    return last || url.host;
  } catch {
    return d.url;
  }
}

// MARK: The API

async function call(method, path, body) {
  const init = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(api + path, init);
  if (response.status === 401) {
    showSignIn("Signed out: enter the token again.");
    throw new Error("signed out");
  }
  const text = await response.text();
  const json = text ? JSON.parse(text) : null;
  if (!response.ok) {
    const error = new Error((json && json.error && json.error.message) || response.status + " " + response.statusText);
    error.detail = json && json.error;
    throw error;
  }
  return json;
}

/// Tells a failed call's message (signing out already shows the token field).
function report(error) {
  if (error.message !== "signed out") toast(error.message);
}

/// A limit typed in KiB/s as the API takes it: bytes a second, or null (none) for empty or 0.
function limitFromKiB(text) {
  const value = Number(text.trim());
  return text.trim() === "" || value === 0 ? null : Math.round(value * 1024);
}

async function command(id, name) {
  try {
    if (name === "remove") {
      const d = state.downloads.get(id);
      const label = d ? nameOf(d) : id;
      if (!confirm("Remove " + label + " from the list?")) return;
      const deleteFile = d && d.state === "completed" && confirm("Also delete the file " + label + "?");
      await call("DELETE", "/downloads/" + encodeURIComponent(id) + (deleteFile ? "?deleteFile=true" : ""));
    } else {
      await call("POST", "/downloads/" + encodeURIComponent(id) + "/" + name);
    }
  } catch (error) {
    report(error);
  }
}

// MARK: Signing in

function showSignIn(message) {
  if (state.events) {
    state.events.close();
    state.events = null;
  }
  $("app").hidden = true;
  $("signin").hidden = false;
  $("signin-message").textContent = message || "";
  $("token").focus();
}

async function start() {
  const params = new URLSearchParams(location.search);
  if (params.has("signin")) {
    history.replaceState(null, "", "/");
    showSignIn(params.get("signin") === "failed" ? "That token is not this daemon's." : "");
    return;
  }
  const response = await fetch(api + "/stats", { credentials: "same-origin" }).catch(() => null);
  if (!response || response.status === 401) {
    showSignIn(response ? "" : "The daemon cannot be reached.");
    return;
  }
  $("signin").hidden = true;
  $("app").hidden = false;
  connect();
  loadSpeeds();
  setInterval(sampleSpeed, 1000);
}

// MARK: The event stream

function setConnection(text, reconnecting) {
  const element = $("connection");
  element.textContent = text;
  element.classList.toggle("reconnecting", reconnecting);
}

function connect() {
  // EventSource sends the last id itself when it reconnects; a daemon that restarted answers with a new snapshot.
  const events = new EventSource(api + "/events");
  state.events = events;
  events.onopen = () => setConnection("Live", false);
  events.onerror = () => {
    setConnection("Reconnecting…", true);
    if (events.readyState === EventSource.CLOSED) {
      // Refused for good (signed out, or an answer that was not a stream): check, then open a new one.
      state.events = null;
      setTimeout(async () => {
        const response = await fetch(api + "/stats", { credentials: "same-origin" }).catch(() => null);
        if (response && response.status === 401) showSignIn("Signed out: enter the token again.");
        else connect();
      }, 1000);
    }
  };
  const on = (name, handle) =>
    events.addEventListener(name, (event) => {
      handle(JSON.parse(event.data));
      scheduleRender();
    });
  on("snapshot", (snapshot) => {
    state.downloads = new Map(snapshot.downloads.map((d) => [d.id, d]));
    state.order = snapshot.downloads.map((d) => d.id);
    state.orderDirty = true;
    for (const id of [...state.selected]) if (!state.downloads.has(id)) state.selected.delete(id);
    state.stats = snapshot.stats;
    state.settings = snapshot.settings;
    showSettings();
    state.snapshotSeen = true;
    setConnection("Live", false);
  });
  on("added", (d) => {
    if (!state.downloads.has(d.id)) state.order.push(d.id);
    state.downloads.set(d.id, d);
    state.orderDirty = true;
  });
  on("changed", (d) => {
    const before = state.downloads.get(d.id);
    if (!before) state.order.push(d.id);
    // The wait a retrying event told of lasts while the download runs with its error (a snapshot has no wait).
    if (before && before.retryAt && d.state === "running" && d.error) d.retryAt = before.retryAt;
    state.downloads.set(d.id, d);
    if (!before || before.position !== d.position || before.priority !== d.priority) state.orderDirty = true;
    if (before && before.state !== d.state) announce(d);
  });
  on("progress", (p) => {
    const d = state.downloads.get(p.id);
    if (!d) return;
    d.receivedBytes = p.receivedBytes;
    if (p.totalBytes != null) d.totalBytes = p.totalBytes;
    d.bytesPerSecond = p.bytesPerSecond;
    d.etaSeconds = p.etaSeconds;
    d.connections = p.connections;
    // Each server's state: the download's own URL first, then its mirrors (a progress event names none).
    if (p.mirrors) d.mirrors = p.mirrors;
  });
  on("retrying", (r) => {
    const d = state.downloads.get(r.id);
    if (!d) return;
    d.error = r.error;
    d.retryAt = Date.now() + r.delaySeconds * 1000;
  });
  on("restarted", (r) => {
    // Not a failure: the download goes on from 0; its error, if one was shown, is over.
    const d = state.downloads.get(r.id);
    if (d) d.error = null;
  });
  on("removed", (r) => {
    if (state.downloads.delete(r.id)) state.order = state.order.filter((id) => id !== r.id);
    state.selected.delete(r.id);
    if (state.detailID === r.id) closeDetail();
  });
  on("stats", (stats) => {
    state.stats = stats;
  });
  on("settings", (settings) => {
    state.settings = settings;
    showSettings();
  });
}

// MARK: Settings and the speed graph

function showSettings() {
  const settings = state.settings;
  if (!settings) return;
  const concurrent = $("setting-concurrent");
  const limit = $("setting-limit");
  if (document.activeElement !== concurrent) concurrent.value = settings.maxConcurrentDownloads;
  if (document.activeElement !== limit) limit.value = settings.limitRate ? Math.round(settings.limitRate / 1024) : "";
  // The schedule's rule in force changes the limits above while it holds.
  const rule = $("schedule-in-force");
  rule.hidden = !settings.scheduleInForce;
  rule.textContent = settings.scheduleInForce ? "Schedule: " + settings.scheduleInForce : "";
  rule.title = settings.scheduleInForce ? "In force now; the limits it sets replace these" : "";
  // The sort rules: which downloads go into which folder beneath the download folder.
  const rules = settings.sortRules || [];
  const sorting = $("sort-rules");
  sorting.hidden = rules.length === 0;
  sorting.textContent = rules.length ? "Sorting: " + rules.map((r) => r.replace(/=([^=]*)$/, " \u2192 $1")).join("; ") : "";
  sorting.title = rules.length ? "Downloads into the download folder go into these folders beneath it; the first rule that matches decides" : "";
}

async function changeSetting(field, value) {
  try {
    state.settings = await call("PATCH", "/settings", { [field]: value });
  } catch (error) {
    report(error);
  }
  showSettings();
}

async function loadSpeeds() {
  try {
    const samples = await call("GET", "/speed");
    state.speeds = samples.total.slice(-600);
  } catch {
    state.speeds = [];
  }
  drawGraph();
}

function sampleSpeed() {
  let running = 0;
  for (const d of state.downloads.values()) if (d.state === "running") running += 1;
  state.speeds.push(running && state.stats ? state.stats.bytesPerSecond : 0);
  if (state.speeds.length > 600) state.speeds.splice(0, state.speeds.length - 600);
  const detail = state.detailID && state.downloads.get(state.detailID);
  if (detail) {
    state.detailSpeeds.push(detail.state === "running" ? detail.bytesPerSecond || 0 : 0);
    if (state.detailSpeeds.length > 600) state.detailSpeeds.splice(0, state.detailSpeeds.length - 600);
    drawLine($("detail-speed"), state.detailSpeeds);
  }
  drawGraph();
}

function drawGraph() {
  drawLine($("speed-graph"), state.speeds);
}

/// Ten minutes of samples as a line, the newest at the right edge, scaled to the highest.
function drawLine(canvas, samples) {
  const context = canvas.getContext("2d");
  const width = canvas.width;
  const height = canvas.height;
  context.clearRect(0, 0, width, height);
  if (!samples.length) return;
  const top = Math.max(1, ...samples);
  context.strokeStyle = getComputedStyle(document.documentElement).getPropertyValue("--accent") || "#2563eb";
  context.lineWidth = 1.5;
  context.beginPath();
  samples.forEach((value, index) => {
    const x = width - (samples.length - 1 - index) * (width / 600);
    const y = height - 1 - (value / top) * (height - 2);
    if (index === 0) context.moveTo(x, y);
    else context.lineTo(x, y);
  });
  context.stroke();
}

// MARK: Notifications

/// Completions and failures are told once a second at most, together: a list of 500 small files finishing makes one
/// message ("37 downloads completed"), not 500.
const pendingNews = { completed: [], failed: [], timer: null };

function announce(d) {
  if (d.state !== "completed" && d.state !== "failed") return;
  pendingNews[d.state].push(d);
  if (!pendingNews.timer) pendingNews.timer = setTimeout(tellNews, 1000);
}

function tellNews() {
  pendingNews.timer = null;
  const lines = [];
  const { completed, failed } = pendingNews;
  if (completed.length === 1) lines.push(nameOf(completed[0]) + " completed");
  else if (completed.length > 1) lines.push(completed.length + " downloads completed");
  if (failed.length === 1) lines.push(nameOf(failed[0]) + " failed: " + (failed[0].error ? failed[0].error.message : ""));
  else if (failed.length > 1) lines.push(failed.length + " downloads failed");
  pendingNews.completed = [];
  pendingNews.failed = [];
  if (!lines.length) return;
  const text = lines.join("\n");
  if ("Notification" in window && Notification.permission === "granted" && document.hidden) {
    new Notification("Haul", { body: text, icon: "/icon.svg" });
  } else {
    toast(text);
  }
}

function toast(text) {
  // Three at most: the oldest goes first.
  const shown = $("toasts").children;
  while (shown.length >= 3) shown[0].remove();
  const element = document.createElement("div");
  element.className = "toast";
  element.textContent = text;
  $("toasts").append(element);
  setTimeout(() => element.remove(), 6000);
}

// MARK: Drawing

function scheduleRender() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  requestAnimationFrame(() => {
    state.renderQueued = false;
    render();
  });
}

const priorityRank = { high: 0, normal: 1, low: 2 };

/// The daemon's order: by priority, then position (what the queue starts first comes first).
function sortOrder() {
  if (!state.orderDirty) return;
  state.orderDirty = false;
  const rank = (id) => {
    const d = state.downloads.get(id);
    return d ? [priorityRank[d.priority] ?? 1, d.position] : [3, 0];
  };
  state.order.sort((a, b) => {
    const [pa, xa] = rank(a);
    const [pb, xb] = rank(b);
    return pa - pb || xa - xb;
  });
}

function visibleIDs() {
  sortOrder();
  const test = filters[state.filter];
  const query = state.query.toLowerCase();
  const ids = [];
  for (const id of state.order) {
    const d = state.downloads.get(id);
    if (!d || !test(d)) continue;
    if (query && !nameOf(d).toLowerCase().includes(query) && !d.url.toLowerCase().includes(query)) continue;
    ids.push(id);
  }
  return ids;
}

function render() {
  const counts = { all: 0, active: 0, waiting: 0, paused: 0, completed: 0, failed: 0 };
  let speed = 0;
  let running = 0;
  for (const d of state.downloads.values()) {
    for (const name in filters) if (filters[name](d)) counts[name] += 1;
    if (d.state === "running") {
      running += 1;
      speed += d.bytesPerSecond || 0;
    }
  }
  for (const button of $("filters").querySelectorAll("button[data-filter]")) {
    button.querySelector(".count").textContent = "(" + counts[button.dataset.filter] + ")";
  }
  // The daemon's figure while anything runs (its last stats event stays as it was once nothing does).
  $("total-speed").textContent = bytes(running === 0 ? 0 : state.stats ? state.stats.bytesPerSecond : speed) + "/s";

  const ids = visibleIDs();
  state.visible = ids;
  $("bulk").hidden = state.selected.size === 0;
  $("bulk-count").textContent = state.selected.size + " selected";
  renderDetail();
  const viewport = $("viewport");
  const list = $("list");
  state.rowHeight = matchMedia("(max-width: 600px)").matches ? 120 : 84;
  list.style.height = ids.length * state.rowHeight + "px";
  $("empty").hidden = ids.length > 0;
  const first = Math.max(0, Math.floor(viewport.scrollTop / state.rowHeight) - 2);
  const last = Math.min(ids.length, Math.ceil((viewport.scrollTop + viewport.clientHeight) / state.rowHeight) + 2);
  const needed = Math.max(0, last - first);
  while (state.pool.length < needed) {
    const row = makeRow();
    state.pool.push(row);
    list.append(row);
  }
  for (let i = 0; i < state.pool.length; i += 1) {
    const row = state.pool[i];
    if (i < needed) {
      bind(row, state.downloads.get(ids[first + i]), first + i);
    } else if (!row.hidden) {
      row.hidden = true;
      row.dataset.downloadId = "";
    }
  }
  if (state.snapshotSeen && !state.firstRenderMarked) {
    // The first full list on screen, for the browser test's measurement.
    state.firstRenderMarked = true;
    performance.mark("haul-first-render");
  }
}

const actions = [
  ["pause", "Pause", (d) => d.state === "queued" || d.state === "running" || d.state === "waitingForNetwork"],
  ["resume", "Resume", (d) => d.state === "paused"],
  ["retry", "Retry", (d) => d.state === "failed" || d.state === "cancelled"],
  ["cancel", "Cancel", (d) => d.state !== "completed" && d.state !== "failed" && d.state !== "cancelled"],
  ["remove", "Remove", () => true],
];

function makeRow() {
  const row = document.createElement("div");
  row.className = "row";
  row.setAttribute("role", "listitem");
  row.tabIndex = 0;
  row.draggable = true;
  const select = document.createElement("input");
  select.type = "checkbox";
  select.className = "select";
  const name = document.createElement("button");
  name.type = "button";
  name.className = "name";
  const head = document.createElement("div");
  head.className = "head";
  head.append(select, name);
  const progress = document.createElement("progress");
  progress.max = 1;
  const meta = document.createElement("div");
  meta.className = "meta";
  const parts = {};
  for (const part of ["size", "speed", "eta", "state", "connections", "error"]) {
    const span = document.createElement("span");
    span.className = part;
    meta.append(span);
    parts[part] = span;
  }
  const buttons = document.createElement("div");
  buttons.className = "actions";
  const actionButtons = {};
  for (const [action, label] of actions) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = label;
    button.dataset.action = action;
    buttons.append(button);
    actionButtons[action] = button;
  }
  row.append(head, buttons, progress, meta);
  row.parts = { select, name, progress, ...parts, buttons: actionButtons };
  return row;
}

function bind(row, d, index) {
  const p = row.parts;
  row.hidden = false;
  row.style.top = index * state.rowHeight + "px";
  row.dataset.downloadId = d.id;
  row.dataset.state = d.state;
  const name = nameOf(d);
  row.setAttribute("aria-label", name + ", " + (stateNames[d.state] || d.state));
  p.name.textContent = name;
  p.name.title = d.url;
  p.name.setAttribute("aria-label", "Details of " + name);
  p.select.checked = state.selected.has(d.id);
  p.select.setAttribute("aria-label", "Select " + name);
  row.classList.toggle("selected", p.select.checked);
  if (d.totalBytes) {
    p.progress.value = Math.min(1, d.receivedBytes / d.totalBytes);
  } else if (d.state === "completed") {
    p.progress.value = 1;
  } else if (d.state === "running") {
    p.progress.removeAttribute("value"); // size not known yet: the bar moves without a fraction
  } else {
    p.progress.value = 0;
  }
  p.progress.setAttribute("aria-label", "Progress of " + name);
  p.size.textContent = bytes(d.receivedBytes) + " of " + bytes(d.totalBytes);
  const running = d.state === "running";
  p.speed.textContent = running ? bytes(d.bytesPerSecond || 0) + "/s" : "";
  p.eta.textContent = running && d.etaSeconds != null ? duration(d.etaSeconds) + " left" : "";
  // A running download with an error waits to try again (the error goes once bytes arrive again).
  const retrying = running && d.error && d.retryAt;
  const wait = retrying ? (d.retryAt - Date.now()) / 1000 : 0;
  p.state.textContent = retrying ? (wait >= 1 ? "Retrying in " + duration(wait) : "Retrying") : stateNames[d.state] || d.state;
  p.connections.textContent = running && !retrying
    ? d.connections + (d.connections === 1 ? " connection" : " connections") + (d.worker ? " on " + d.worker : "")
    : "";
  p.error.textContent = d.error && d.state !== "completed" ? d.error.message : "";
  for (const [action, , shows] of actions) {
    const button = p.buttons[action];
    button.hidden = !shows(d);
    button.setAttribute("aria-label", button.textContent + " " + name);
  }
}

// MARK: The detail panel

function openDetail(id) {
  state.detailID = id;
  state.detailSpeeds = [];
  $("detail").hidden = false;
  call("GET", "/speed?download=" + encodeURIComponent(id))
    .then((samples) => {
      const track = samples.downloads.find((t) => t.id === id);
      if (track && state.detailID === id) {
        // Aligned to the end of the total: seconds after the track ended count 0.
        const after = samples.total.length - (track.offset + track.samples.length);
        state.detailSpeeds = track.samples.concat(new Array(Math.max(0, after)).fill(0)).slice(-600);
      }
      scheduleRender();
    })
    .catch(() => {});
  scheduleRender();
  $("detail-close").focus();
}

function closeDetail() {
  const id = state.detailID;
  state.detailID = null;
  $("detail").hidden = true;
  const row = document.querySelector('.row[data-download-id="' + CSS.escape(id || "") + '"] .name');
  if (row) row.focus();
}

const fieldNames = [
  ["id", "Id"], ["url", "URL"], ["path", "File"], ["directory", "Folder"], ["state", "State"],
  ["priority", "Priority"], ["position", "Position"], ["receivedBytes", "Received"], ["totalBytes", "Size"],
  ["bytesPerSecond", "Speed"], ["etaSeconds", "Time left"], ["connections", "Connections"], ["worker", "Worker"],
  ["limitRate", "Speed limit"], ["resumable", "Resumable"], ["sha256", "SHA-256"], ["error", "Error"],
  ["after", "After"], ["origin", "Added through"], ["createdAt", "Added"], ["completedAt", "Completed"],
  ["options", "Options"],
];

function fieldText(key, value) {
  if (value == null) return "";
  if (key === "receivedBytes" || key === "totalBytes") return bytes(value) + " (" + value + " bytes)";
  if (key === "bytesPerSecond" || key === "limitRate") return bytes(value) + "/s";
  if (key === "etaSeconds") return duration(value);
  if (key === "error") return value.message + " (" + value.code + (value.httpStatus ? ", HTTP " + value.httpStatus : "") + ")";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function renderDetail() {
  const d = state.detailID && state.downloads.get(state.detailID);
  if (!d) {
    if (state.detailID) closeDetail();
    return;
  }
  $("detail-title").textContent = nameOf(d);
  if (document.activeElement !== $("detail-priority")) $("detail-priority").value = d.priority;
  if (document.activeElement !== $("detail-limit")) {
    $("detail-limit").value = d.limitRate ? Math.round(d.limitRate / 1024) : "";
  }
  // A new link for a download that is not complete; the panel says so when the old one expired.
  $("detail-expired").hidden = !(d.error && d.error.code === "linkExpired");
  $("detail-link").hidden = d.state === "completed";
  const list = $("detail-fields");
  const items = [];
  for (const [key, label] of fieldNames) {
    const text = fieldText(key, d[key]);
    if (text === "") continue;
    const dt = document.createElement("dt");
    dt.textContent = label;
    const dd = document.createElement("dd");
    dd.textContent = text;
    items.push(dt, dd);
  }
  list.replaceChildren(...items);
  drawServers(d);
  drawSegments(d);
  drawLine($("detail-speed"), state.detailSpeeds);
}

/// A download fetched from several servers: each one's URL, state, connections and speed, and why it was dropped.
function drawServers(d) {
  const urls = [d.url].concat((d.options && d.options.mirrors) || []);
  const running = d.state === "running" && d.mirrors && d.mirrors.length;
  $("detail-servers").hidden = urls.length < 2;
  const items = urls.map((url, index) => {
    const li = document.createElement("li");
    const mirror = running ? d.mirrors[index] : null;
    li.dataset.state = mirror ? mirror.state : "idle";
    let text = url;
    if (mirror) {
      text += ": " + mirror.state;
      if (mirror.state === "active" || mirror.connections) {
        text += ", " + mirror.connections + (mirror.connections === 1 ? " connection, " : " connections, ") +
          bytes(mirror.bytesPerSecond) + "/s, " + bytes(mirror.receivedBytes) + " received";
      }
      if (mirror.reason) text += " (" + mirror.reason + ")";
    }
    li.textContent = text;
    return li;
  });
  $("detail-mirrors").replaceChildren(...items);
}

/// The file as a bar: each segment's fetched part filled; one segment (a single connection) is the received bytes.
function drawSegments(d) {
  const canvas = $("detail-segments");
  const context = canvas.getContext("2d");
  const width = canvas.width;
  context.clearRect(0, 0, width, canvas.height);
  const total = d.totalBytes;
  const style = getComputedStyle(document.documentElement);
  context.fillStyle = style.getPropertyValue("--bar");
  context.fillRect(0, 0, width, canvas.height);
  if (!total) {
    $("detail-segments-text").textContent = "The size is not known yet.";
    return;
  }
  context.fillStyle = style.getPropertyValue("--accent");
  const segments = d.segments && d.segments.length ? d.segments : [{ start: 0, end: total, offset: d.receivedBytes }];
  const open = segments.filter((segment) => segment.offset < segment.end).length;
  $("detail-segments-text").textContent =
    segments.length + (segments.length === 1 ? " part" : " parts") + ", " + (segments.length - open) + " fetched" +
    (d.state === "running" ? "; " + d.connections + (d.connections === 1 ? " connection" : " connections") : "");
  for (const segment of segments) {
    const x = (segment.start / total) * width;
    const w = ((Math.min(segment.offset, segment.end) - segment.start) / total) * width;
    context.fillRect(x, 0, Math.max(0, w), canvas.height);
    context.fillStyle = style.getPropertyValue("--fg");
    context.fillRect((segment.start / total) * width, 0, 1, canvas.height);
    context.fillStyle = style.getPropertyValue("--accent");
  }
}

async function move(where) {
  const id = state.detailID;
  if (!id) return;
  sortOrder();
  const index = state.order.indexOf(id);
  let body;
  if (where === "top" || where === "bottom") body = { to: where };
  else if (where === "up") body = index > 0 ? { before: state.order[index - 1] } : { to: "top" };
  else body = index + 2 < state.order.length ? { before: state.order[index + 2] } : { to: "bottom" };
  try {
    await call("POST", "/downloads/" + encodeURIComponent(id) + "/move", body);
  } catch (error) {
    report(error);
  }
}

/// Dropping a dragged row on another moves it before that one (or to the bottom when dropped on the last row's
/// lower half).
async function moveBefore(id, targetID, after) {
  if (!id || !targetID || id === targetID) return;
  sortOrder();
  let body = { before: targetID };
  if (after) {
    const next = state.order[state.order.indexOf(targetID) + 1];
    body = next && next !== id ? { before: next } : { to: "bottom" };
  }
  try {
    await call("POST", "/downloads/" + encodeURIComponent(id) + "/move", body);
  } catch (error) {
    report(error);
  }
}

/// Changes one field of the download in the panel; whether the daemon took it.
async function update(field, value) {
  const id = state.detailID;
  if (!id) return false;
  try {
    await call("PATCH", "/downloads/" + encodeURIComponent(id), { [field]: value });
    return true;
  } catch (error) {
    report(error);
    return false;
  }
}

// MARK: Selection

function select(id, event) {
  const ids = state.visible || [];
  if (event.shiftKey && state.anchor && ids.includes(state.anchor)) {
    const [a, b] = [ids.indexOf(state.anchor), ids.indexOf(id)].sort((x, y) => x - y);
    for (const other of ids.slice(a, b + 1)) state.selected.add(other);
  } else if (state.selected.has(id)) {
    state.selected.delete(id);
  } else {
    state.selected.add(id);
  }
  state.anchor = id;
  scheduleRender();
}

async function bulk(name) {
  // Those that run last: a running download that pauses or is removed hands its slot to the next queued one at once,
  // so acting on it first would have the daemon start each queued one of the selection in turn, only to stop it.
  const holdsSlot = (id) => {
    const d = state.downloads.get(id);
    return d && (d.state === "running" || d.state === "waitingForNetwork") ? 1 : 0;
  };
  const ids = [...state.selected].sort((a, b) => holdsSlot(a) - holdsSlot(b));
  if (!ids.length) return;
  if (name === "remove" && !confirm("Remove " + ids.length + " downloads from the list? Their files stay.")) return;
  const failures = [];
  for (const id of ids) {
    const d = state.downloads.get(id);
    if (!d) continue;
    if (name === "pause" && !(d.state === "queued" || d.state === "running" || d.state === "waitingForNetwork")) continue;
    if (name === "resume" && d.state !== "paused") continue;
    try {
      if (name === "remove") await call("DELETE", "/downloads/" + encodeURIComponent(id));
      else await call("POST", "/downloads/" + encodeURIComponent(id) + "/" + name);
    } catch (error) {
      failures.push(nameOf(d) + ": " + error.message);
    }
  }
  if (name === "remove") state.selected.clear();
  if (failures.length) toast(failures.join("\n"));
  scheduleRender();
}

// MARK: Adding

function openAdd() {
  $("add-errors").textContent = "";
  $("add-dialog").showModal();
  $("add-urls").focus();
}

function parseHeaders(text) {
  const headers = {};
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const colon = line.indexOf(":");
    if (colon < 1) throw new Error("Header '" + line + "' is not Name: value");
    headers[line.slice(0, colon).trim()] = line.slice(colon + 1).trim();
  }
  return headers;
}

async function submitAdd(event) {
  event.preventDefault();
  const lines = $("add-urls").value.split("\n").map((line) => line.trim()).filter((line) => line);
  const errors = [];
  let headers = {};
  try {
    headers = parseHeaders($("add-headers").value);
  } catch (error) {
    errors.push(error.message);
  }
  const filename = $("add-filename").value.trim();
  if (filename && lines.length !== 1) errors.push("A file name needs exactly one URL.");
  if (errors.length) {
    $("add-errors").textContent = errors.join("\n");
    return;
  }
  const template = { paused: $("add-paused").checked, priority: $("add-priority").value, headers };
  const folder = $("add-folder").value.trim();
  if (folder) template.directory = folder;
  if (filename) template.filename = filename;
  const connections = $("add-connections").value.trim();
  if (connections) template.connections = Number(connections);
  const checksum = $("add-checksum").value.trim();
  if (checksum) template.checksum = checksum;
  // The daemon adds a list all or nothing; the page adds what is valid and names the rest: it sends the list,
  // and on a refused item drops that line (named in the errors) and sends the rest again.
  let pending = lines.map((url, line) => ({ url, line }));
  $("add-submit").disabled = true;
  try {
    while (pending.length) {
      try {
        await call("POST", "/downloads", pending.map(({ url }) => ({ ...template, url })));
        pending = [];
      } catch (error) {
        const index = error.detail && error.detail.index;
        if (index == null || index >= pending.length) {
          errors.push(error.message);
          break;
        }
        const bad = pending[index];
        errors.push("Line " + (bad.line + 1) + " (" + bad.url + "): " + error.message.replace(/^item \d+: /, ""));
        pending.splice(index, 1);
      }
    }
  } finally {
    $("add-submit").disabled = false;
  }
  if (errors.length) {
    $("add-errors").textContent = errors.join("\n");
  } else {
    $("add-dialog").close();
    $("add-form").reset();
  }
}

// MARK: Wiring

function wire() {
  $("add-open").addEventListener("click", openAdd);
  $("add-cancel").addEventListener("click", () => $("add-dialog").close());
  $("add-form").addEventListener("submit", submitAdd);
  $("pause-all").addEventListener("click", () => call("POST", "/pause-all").catch(report));
  $("resume-all").addEventListener("click", () => call("POST", "/resume-all").catch(report));
  $("clear-finished").addEventListener("click", () => call("POST", "/clean").catch(report));
  $("filters").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-filter]");
    if (!button) return;
    state.filter = button.dataset.filter;
    for (const other of $("filters").querySelectorAll("button[data-filter]")) {
      other.setAttribute("aria-pressed", String(other === button));
    }
    $("viewport").scrollTop = 0;
    scheduleRender();
  });
  $("setting-concurrent").addEventListener("change", (event) => {
    const value = Number(event.target.value);
    if (value >= 1) changeSetting("maxConcurrentDownloads", value);
  });
  $("setting-limit").addEventListener("change", (event) => changeSetting("limitRate", limitFromKiB(event.target.value)));
  $("search").addEventListener("input", (event) => {
    state.query = event.target.value;
    scheduleRender();
  });
  $("viewport").addEventListener("scroll", scheduleRender, { passive: true });
  window.addEventListener("resize", scheduleRender);
  $("list").addEventListener("click", (event) => {
    const row = event.target.closest(".row");
    const id = row && row.dataset.downloadId;
    if (!id) return;
    const button = event.target.closest("button[data-action]");
    if (button) command(id, button.dataset.action);
    else if (event.target.closest(".name")) openDetail(id);
    else if (event.target.closest(".select")) select(id, event);
  });
  $("list").addEventListener("dragstart", (event) => {
    const row = event.target.closest(".row");
    if (!row || !row.dataset.downloadId) return;
    event.dataTransfer.setData("application/x-haul-download", row.dataset.downloadId);
    event.dataTransfer.effectAllowed = "move";
  });
  $("list").addEventListener("dragover", (event) => {
    if (event.dataTransfer.types.includes("application/x-haul-download")) event.preventDefault();
  });
  $("list").addEventListener("drop", (event) => {
    const row = event.target.closest(".row");
    const id = event.dataTransfer.getData("application/x-haul-download");
    if (!row || !id) return;
    event.preventDefault();
    const box = row.getBoundingClientRect();
    moveBefore(id, row.dataset.downloadId, event.clientY > box.top + box.height / 2);
  });
  $("select-all").addEventListener("click", () => {
    for (const id of state.visible || []) state.selected.add(id);
    scheduleRender();
  });
  $("bulk-pause").addEventListener("click", () => bulk("pause"));
  $("bulk-resume").addEventListener("click", () => bulk("resume"));
  $("bulk-remove").addEventListener("click", () => bulk("remove"));
  $("bulk-clear").addEventListener("click", () => {
    state.selected.clear();
    scheduleRender();
  });
  $("detail-close").addEventListener("click", closeDetail);
  $("detail-copy").addEventListener("click", async () => {
    const d = state.detailID && state.downloads.get(state.detailID);
    if (!d) return;
    try {
      await navigator.clipboard.writeText(d.url);
      toast("Copied the URL");
    } catch {
      toast("The browser did not allow copying; the URL is in the fields below.");
    }
  });
  for (const button of document.querySelectorAll("#detail [data-move]")) {
    button.addEventListener("click", () => move(button.dataset.move));
  }
  $("detail-priority").addEventListener("change", (event) => update("priority", event.target.value));
  $("detail-limit").addEventListener("change", (event) => update("limitRate", limitFromKiB(event.target.value)));
  $("detail-link").addEventListener("submit", async (event) => {
    event.preventDefault();
    const field = $("detail-url");
    if (await update("url", field.value.trim())) field.value = "";
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && state.detailID) closeDetail();
    const inField = event.target.closest && event.target.closest("input, textarea, select, dialog");
    if (event.key !== "Delete" || inField) return;
    if (state.selected.size) {
      bulk("remove");
      return;
    }
    const row = document.activeElement && document.activeElement.closest && document.activeElement.closest(".row");
    if (row && row.dataset.downloadId) command(row.dataset.downloadId, "remove");
  });
  if ("Notification" in window && Notification.permission === "default") {
    document.addEventListener("click", () => Notification.requestPermission().catch(() => {}), { once: true });
  }
}

wire();
start();
