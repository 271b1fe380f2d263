// Shape of a public Deno service supervisor (code index, query: draft-min,
// id 70681675006): llama-server argv as a TypeScript string array. Reconstructed.
const SERVICES = [
  {
    name: "CoderLlama",
    cmd: LLAMA_EXE,
    args: [
      "-m", join(ROOT, "models/coder-7b-q4_k_m.gguf"),
      "-md", join(ROOT, "models/coder-0.5b-q8_0.gguf"),
      "-ngld", "99",
      "-c", "32768", "-cd", "32768",
      "--draft-max", "16", "--draft-min", "4", "--draft-p-min", "0.65",
      "--port", "8091",
    ],
  },
];
