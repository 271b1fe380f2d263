# Synthetic (round 3 shapes): PowerShell: & call operator, backtick continuations, backslash paths.
$model = "C:\models\t.gguf"
& .\llama-server.exe -m $model -md C:\models\d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 `
  --spec-draft-n-max 16 `
  --spec-draft-n-min 4 `
  --port 8080
