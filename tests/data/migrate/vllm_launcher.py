# Shape of a public Python vLLM launcher (code index, query: speculative-model,
# id 2469977704): argv extended with a list. Reconstructed.
def build_command(self):
    cmd = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", self.model]
    if self.config["speculative_decoding"]:
        cmd.extend([
            "--speculative-model", self.config["draft_model"],
            "--num-speculative-tokens", "5",
        ])
    return cmd
