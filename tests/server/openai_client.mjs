// openai_client.mjs: drives `ragkv serve --engine llama.cpp` with the
// official OpenAI client (the pinned `openai` npm package, maxRetries 0 so
// that no error is hidden by a retry). Run by tests/server/openai_server_test.cc:
//   node openai_client.mjs BASE_URL MODEL CASE [JSON_ARG]
// prints one JSON object with what the case saw; the test asserts on it.
import OpenAI from "openai";

const [base, model, which, arg] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0, timeout: 120000 });
const input = arg ? JSON.parse(arg) : {};

async function chat(body) {
  const r = await client.chat.completions.create({ model, ...body });
  return { id: r.id, object: r.object, created: r.created, text: r.choices[0].message.content,
           finish_reason: r.choices[0].finish_reason, usage: r.usage, ragkv: r.ragkv };
}

async function chatStream(body, abortAfter) {
  const stream = await client.chat.completions.create({ model, ...body, stream: true });
  let text = "", finish = null, usage = null, chunks = 0, ragkv = null, ids = new Set();
  for await (const c of stream) {
    ids.add(c.id);
    chunks++;
    if (c.usage) usage = c.usage;
    if (c.ragkv) ragkv = c.ragkv;
    if (c.choices.length) {
      text += c.choices[0].delta.content ?? "";
      if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    }
    if (abortAfter && chunks >= abortAfter) {
      stream.controller.abort();
      return { aborted: true, chunks, text };
    }
  }
  return { text, finish_reason: finish, usage, chunks, ragkv, ids: ids.size };
}

async function completion(body) {
  const r = await client.completions.create({ model, ...body });
  return { text: r.choices[0].text, finish_reason: r.choices[0].finish_reason, usage: r.usage,
           ragkv: r.ragkv };
}

async function completionStream(body) {
  const stream = await client.completions.create({ model, ...body, stream: true });
  let text = "", finish = null, usage = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    if (c.choices.length) {
      text += c.choices[0].text ?? "";
      if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    }
  }
  return { text, finish_reason: finish, usage };
}

// raw: one HTTP call outside the client (bodies the client would not send).
async function raw(path, body, method = "POST") {
  const r = await fetch(base + path, {
    method, headers: { "content-type": "application/json" },
    body: method === "POST" ? (typeof body === "string" ? body : JSON.stringify(body)) : undefined,
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { }
  return { status: r.status, json, text: json ? undefined : text.slice(0, 200) };
}

async function clientError(fn) {
  try {
    const r = await fn();
    return { status: 200, r };
  } catch (e) {
    return { status: e.status ?? -1, name: e.constructor.name, message: e.message,
             param: e.param ?? null, code: e.code ?? null, type: e.type ?? null };
  }
}

const cases = {
  chat: () => chat(input),
  chat_stream: () => chatStream(input),
  completion: () => completion(input),
  completion_stream: () => completionStream(input),
  abort: async () => {
    const before = (await raw("/health", null, "GET")).json;
    const a = await chatStream(input, 2);
    // The server goes on serving after the abort.
    const b = await chat({ ...input, max_tokens: 4 });
    // A slot is freed just after its response is written: ask /health until
    // no slot is active (at most 20 tries, 50 ms apart).
    let health, tries = 0;
    do {
      if (tries) await new Promise((r) => setTimeout(r, 50));
      health = (await raw("/health", null, "GET")).json;
    } while (++tries < 20 && health.active !== 0);
    return { abort: a, after: b, before, health };
  },
  // abort_held: a stream aborted after its first event while the server
  // holds it (its blend stalled); then /health until no slot is active
  // (at most 15 s).
  abort_held: async () => {
    const before = (await raw("/health", null, "GET")).json;
    const a = await chatStream(input, 1);
    let health, tries = 0;
    do {
      if (tries) await new Promise((r) => setTimeout(r, 100));
      health = (await raw("/health", null, "GET")).json;
    } while (++tries < 150 && health.active !== 0);
    return { abort: a, before, health };
  },
  // abort_whole_held: a non-streaming request whose client leaves after
  // input.abort_ms while the server holds it; then /health as abort_held.
  abort_whole_held: async () => {
    const before = (await raw("/health", null, "GET")).json;
    let aborted = false, error = null;
    try {
      await client.chat.completions.create({ model, ...input.body },
                                           { signal: AbortSignal.timeout(input.abort_ms) });
    } catch (e) {
      aborted = e.status === undefined;  // no HTTP answer: the client left
      error = String(e);
    }
    let health, tries = 0;
    do {
      if (tries) await new Promise((r) => setTimeout(r, 100));
      health = (await raw("/health", null, "GET")).json;
    } while (++tries < 150 && health.active !== 0);
    return { abort: { aborted, error }, before, health };
  },
  // busy: every request at once; those beyond the slots and the queue get 429.
  busy: async () => {
    const out = await Promise.all(input.requests.map((b) =>
      clientError(() => chatStream(b))));
    return { statuses: out.map((o) => o.status), errors: out.filter((o) => o.status !== 200) };
  },
  // documents: the same request twice (the second finds the documents' KV
  // stored by the first). input: {body, min_cached}.
  documents: async () => {
    const first = await chat(input.body);
    // Store-back runs after the response: ask again until it has landed
    // (at most 20 tries, 100 ms apart).
    // Another system message first: the prompt's prefix differs, so no
    // slot's kept cells serve it and the documents' KV comes from the store.
    // Each document is stored by its own task: ask until all have landed
    // (cached_tokens reaches min_cached; at most 40 tries, 100 ms apart).
    const body = input.body;
    const again = { ...body, messages: [{ role: "system", content: "Answer briefly." }, ...body.messages] };
    let second, tries = 0;
    do {
      if (tries) await new Promise((r) => setTimeout(r, 100));
      second = await chat(again);
    } while (++tries < 40 && second.usage.prompt_tokens_details.cached_tokens < input.min_cached);
    return { first, second, tries };
  },
  // sequence: the chat requests in order; each item is a body (an error:
  // {status, message, param, code}), or
  // {retry: [bodies], min_cached}: the bodies in turn until one reports
  // cached_tokens >= min_cached (store-back lands after a response).
  // An item {http: {method, path, body}} is one raw HTTP call ({status, json}).
  sequence: async () => {
    const out = [];
    for (const item of input.requests) {
      if (item.http) {
        out.push(await raw(item.http.path, item.http.body, item.http.method));
        continue;
      }
      if (!item.retry) {
        out.push(await clientError(() => chat(item)).then((e) => e.status === 200 ? e.r : e));
        continue;
      }
      let r;
      for (const b of item.retry) {
        r = await chat(b);
        if (r.usage.prompt_tokens_details.cached_tokens >= item.min_cached) break;
      }
      out.push(r);
    }
    return out;
  },
  // until_metric: input.body again and again (at most input.tries, 100 ms
  // apart) until the /metrics line that starts with input.metric reaches
  // input.min (store-back lands after a response); the last response, the
  // tries, the value (0: no such line) and every /metrics line that starts
  // with input.family.
  until_metric: async () => {
    let last, value = 0, tries = 0, family = [];
    do {
      if (tries) await new Promise((r) => setTimeout(r, 100));
      last = await chat(input.body);
      const lines = (await (await fetch(base + "/metrics")).text()).split("\n");
      const line = lines.find((l) => l.startsWith(input.metric));
      value = line ? Number(line.split(" ").pop()) : 0;
      family = lines.filter((l) => input.family && l.startsWith(input.family));
    } while (++tries < input.tries && value < input.min);
    return { last, tries, value, family };
  },
  // deadline: a request past --request-timeout, whole and streamed; then one
  // that fits.
  deadline: async () => {
    const whole = await clientError(() => chat(input));
    const streamed = await clientError(() => chatStream(input));
    const after = await chat({ ...input, max_tokens: 2 });
    let health, tries = 0;
    do {
      if (tries) await new Promise((r) => setTimeout(r, 50));
      health = (await raw("/health", null, "GET")).json;
    } while (++tries < 20 && health.active !== 0);
    return { whole, streamed, after, health };
  },
  metrics: async () => {
    await chatStream({ ...input });
    await chat({ ...input });
    await raw("/v1/chat/completions", "{bad");
    const r = await fetch(base + "/metrics");
    return { status: r.status, text: await r.text() };
  },
  // conversation: a first turn, the same prompt again, then a second turn.
  conversation: async () => {
    const first = await chat(input);
    const same = await chat(input);
    const next = await chat({ ...input, messages: [...input.messages,
      { role: "assistant", content: first.text }, { role: "user", content: "And then?" }] });
    return { first, same, next };
  },
  // concurrent: every request at once (streaming), then each alone.
  concurrent: async () => {
    const together = await Promise.all(input.requests.map((b) => chatStream(b)));
    const alone = [];
    for (const b of input.requests) alone.push(await chatStream(b));
    return { together, alone };
  },
  errors: async () => {
    const ok = { model, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 };
    const out = {};
    out.malformed = await raw("/v1/chat/completions", "{not json");
    out.not_object = await raw("/v1/chat/completions", "[1,2]");
    out.wrong_type = await raw("/v1/chat/completions", { ...ok, temperature: "hot" });
    out.no_messages = await raw("/v1/chat/completions", { model, max_tokens: 2 });
    out.unknown_model = await clientError(() =>
      client.chat.completions.create({ ...ok, model: "no-such-model" }));
    out.n2 = await clientError(() => client.chat.completions.create({ ...ok, n: 2 }));
    out.logprobs = await raw("/v1/chat/completions", { ...ok, logprobs: true });
    out.tools = await raw("/v1/chat/completions", {
      ...ok, tools: [{ type: "function", function: { name: "f", parameters: {} } }] });
    out.image = await raw("/v1/chat/completions", { ...ok, messages: [{ role: "user", content: [
      { type: "text", text: "what is this" },
      { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] }] });
    out.too_long = await raw("/v1/chat/completions", { ...ok, messages: [{ role: "user",
      content: "Once upon a time there was a little dog. ".repeat(400) }] });
    out.oversized = await raw("/v1/chat/completions", { ...ok, messages: [{ role: "user",
      content: "x".repeat(9 << 20) }] });
    out.bad_ids = await raw("/v1/completions", { model, prompt: [1, 2, 99999999], max_tokens: 2 });
    out.bad_logit_bias = await raw("/v1/chat/completions", { ...ok, logit_bias: { "abc": 1 } });
    out.defaults = await raw("/v1/chat/completions", { ...ok, n: 1, presence_penalty: 0,
      frequency_penalty: 0, response_format: { type: "text" }, user: "u1", logprobs: false,
      stream: false, tool_choice: "none", tools: [] });
    out.no_route = await raw("/v1/embeddings", { model, input: "x" });
    out.models = await client.models.list().then((p) => p.data.map((m) => m.id));
    out.health = await raw("/health", null, "GET");
    out.after = await raw("/v1/chat/completions", ok);
    return out;
  },
};

const result = await cases[which]();
process.stdout.write(JSON.stringify(result) + "\n");
