# Synthetic (round 3 shapes): a Nomad job's args list beside its image (the image names the tool: left).
task "llama" {
  driver = "docker"
  config {
    image = "ghcr.io/ggml-org/llama.cpp:server"
    args  = ["-m", "/m/t.gguf", "-md", "/m/d.gguf", "--draft-max", "16"]
  }
}
