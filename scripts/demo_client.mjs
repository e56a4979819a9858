// demo_client.mjs: scripts/demo's client. The official OpenAI client (the
// pinned `openai` npm package, resolved from a node_modules beside this
// file, as tests/server/openai_client.mjs is; maxRetries 0 so no error is
// hidden by a retry) sends RAG chat requests to `ragkv serve --engine
// llama.cpp`: documents from the project's own docs, then the same
// documents again with another question, then in another order. Streams
// each answer and prints TTFT (the time to the first non-empty content
// delta), usage.prompt_tokens_details.cached_tokens and the answer.
//   node demo_client.mjs BASE_URL MODEL REPO_ROOT [MAX_TOKENS]
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [base, model, root, maxTokens = "32"] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0, timeout: 300000 });

// opening: the first prose paragraphs of a markdown file (no heading, code,
// table or list), lines joined, at most `chars` characters (~256 tokens of
// the demo model), cut at a sentence end.
function opening(file, chars = 700) {
  const blocks = readFileSync(`${root}/${file}`, "utf8").split(/\n\s*\n/).map((b) => b.trim());
  let text = "";
  for (const b of blocks) {
    if (!b || /^[#`|<>-]/.test(b)) continue;
    text += (text ? " " : "") + b.replace(/\s*\n\s*/g, " ");
    if (text.length >= chars) break;
  }
  if (text.length > chars) {
    const cut = text.lastIndexOf(". ", chars);
    text = text.slice(0, cut > 0 ? cut + 1 : chars);
  }
  return text;
}

const docs = [
  { title: "ragkv", text: opening("README.md") },
  { title: "CacheBlend", text: opening("docs/blend.md") },
  { title: "The KV record format", text: opening("docs/kv_format.md") },
];
const runs = [
  { label: "1 cold", documents: docs, question: "What does ragkv precompute for each document chunk?" },
  { label: "2 same docs", documents: docs, question: "How are the cached chunks fused into one prompt cache?" },
  { label: "3 reordered", documents: [docs[2], docs[0], docs[1]],
    question: "What does ragkv precompute for each document chunk?" },
];

async function ask(run) {
  const t0 = performance.now();
  const stream = await client.chat.completions.create({
    model, stream: true, stream_options: { include_usage: true }, temperature: 0,
    max_tokens: Number(maxTokens), documents: run.documents,
    messages: [{ role: "user", content: run.question }],
  });
  let ttft = null, text = "", usage = null, ragkv = null, finish = null;
  for await (const chunk of stream) {
    const piece = chunk.choices[0]?.delta?.content ?? "";
    if (piece && ttft === null) ttft = performance.now() - t0;
    text += piece;
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    if (chunk.usage) usage = chunk.usage;
    if (chunk.ragkv) ragkv = chunk.ragkv;
  }
  return { ttft, text, usage, ragkv, finish, e2e: performance.now() - t0 };
}

const rows = [];
for (const run of runs) {
  const r = await ask(run);
  rows.push({ run, r });
  console.log(`Q${run.label}: ${run.question}`);
  console.log(`   documents: ${run.documents.map((d) => d.title).join(", ")}`);
  console.log(`   answer (${r.finish}): ${JSON.stringify(r.text.trim())}`);
}
console.log("");
const head = ["request", "prompt_tokens", "cached_tokens", "from_slot", "TTFT_ms", "blend_ms",
              "prefill_ms", "e2e_ms"];
const table = [head, ...rows.map(({ run, r }) => [
  run.label, r.usage?.prompt_tokens ?? "-", r.usage?.prompt_tokens_details?.cached_tokens ?? "-",
  r.ragkv?.slot_prefix_tokens ?? "-",
  r.ttft === null ? "-" : r.ttft.toFixed(1), r.ragkv?.blend_ms?.toFixed?.(1) ?? "-",
  r.ragkv?.prefill_ms?.toFixed?.(1) ?? "-", r.e2e.toFixed(1)])];
const width = head.map((_, i) => Math.max(...table.map((row) => String(row[i]).length)));
for (const row of table) console.log(row.map((c, i) => String(c).padEnd(width[i])).join("  "));
