# Synthetic (round 3 shapes): PowerShell: & call operator, backtick continuations, backslash paths.
$model = "C:\models\t.gguf"
& .\llama-server.exe -m $model -md C:\models\d.gguf `
  --draft-max 16 `
  --draft-min 4 `
  --port 8080
