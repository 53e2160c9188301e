// The service's API from the browser: the user's bearer token (kept in sessionStorage, so it
// goes when the tab closes) on every call, and the API's {"error": "..."} as the thrown message.

const kTokenKey = "ddpx-token";

export function token() {
  return sessionStorage.getItem(kTokenKey) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(kTokenKey, value);
  else sessionStorage.removeItem(kTokenKey);
}

// A refused or failed call: `status` is the HTTP status (0 when the service did not answer).
export class ApiError extends Error {
  constructor(status, message) {
    super(status ? `${status}: ${message}` : message);
    this.status = status;
  }
}

async function send(method, path) {
  const init = { method, headers: { Authorization: `Bearer ${token()}` } };
  if (method === "POST") {
    init.headers["Content-Type"] = "application/json";
    init.body = "{}";
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, `cannot reach the service (${e.message})`);
  }
  if (!res.ok) {
    const text = await res.text();
    let message = text.trim() || res.statusText || "no message";
    try {
      message = JSON.parse(text).error || message;
    } catch (_) {
      // not JSON (e.g. a route this service does not have): the text as it came
    }
    throw new ApiError(res.status, message);
  }
  return res;
}

// The reply's JSON.
export async function call(method, path) {
  return (await send(method, path)).json();
}

// A file the API answers (a backup): its bytes and the name the service gives it.
export async function download(path, fallbackName) {
  const res = await send("GET", path);
  const disposition = res.headers.get("Content-Disposition") || "";
  const match = /filename="?([^";]+)"?/.exec(disposition);
  return { blob: await res.blob(), name: match ? match[1] : fallbackName };
}
