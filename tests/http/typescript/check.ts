// A program written against the client @hey-api/openapi-ts generates from
// /v1/openapi.json (tests/http/test_generated_typescript_client.py): it must type-check
// (tsc --strict) and then upload, search and chat against the real server at argv[2]
// with the key in argv[3], printing what it got as one JSON line.
import { client } from "./gen/client.gen";
import {
  createAgent,
  createDocument,
  createTextDocument,
  searchKnowledge,
  sendChatMessage,
} from "./gen/sdk.gen";

declare const process: { argv: string[] };

async function main(): Promise<void> {
const [baseUrl, key] = process.argv.slice(2);
client.setConfig({ baseUrl, auth: () => key });

const text = await createTextDocument({
  throwOnError: true,
  body: { source: "handbook.md", text: "Employees get 20 days.", external_id: "hr/handbook" },
});
const file = new Blob(["# Handbook\n\nEmployees get 25 vacation days per year.\n"], {
  type: "text/markdown",
});
const uploaded = await createDocument({
  throwOnError: true,
  body: { file: new File([file], "handbook.md"), external_id: "hr/handbook" },
});
const found = await searchKnowledge({
  throwOnError: true, body: { query: "vacation days", top_k: 2 } });
const agent = await createAgent({
  throwOnError: true, body: { name: "HR" } });
const answer = await sendChatMessage({
  throwOnError: true,
  body: { agentId: agent.data.id, message: "How many vacation days?" },
});
console.log(
  JSON.stringify({
    replaced: text.data.id,
    document: uploaded.data,
    chunks: found.data.results.map((result) => result.chunk),
    answer: answer.data.response,
    citations: answer.data.citations,
  }),
);
}

main().catch((error: unknown) => {
  console.error(error);
  throw error;
});
