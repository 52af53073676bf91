// The admin API over fetch, and the token the page presents.
//
// The token lives in sessionStorage: it survives a reload of the tab, not
// the browser session, and no other origin can read it.

const TOKEN_KEY = "keel.adminToken";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** An API request that failed: the HTTP status (0: no answer) and the
 *  node's error code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }

  toString() {
    const status = this.status ? `${this.status} ` : "";
    return `${status}${this.code}: ${this.message}`;
  }
}

/** Calls METHOD PATH with the token; resolves with the JSON answer, rejects
 *  with an ApiError carrying the node's own code and message. */
export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  const init = { method, headers, cache: "no-store" };
  if (method !== "GET") {
    // The node refuses any other content type on a non-GET admin request.
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body ?? {});
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, "unreachable", `the node did not answer (${err.message})`);
  }
  const text = await res.text();
  let json;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  if (!res.ok)
    throw new ApiError(res.status, json?.code ?? "http_error",
                       json?.message ?? (text.trim() || res.statusText || "no message"));
  if (json === undefined)
    throw new ApiError(res.status, "bad_answer", `${path} answered something that is not JSON`);
  return json;
}
