@echo off
REM Reconstructed (issue 27 shape): CRLF line ends, ^ continuations.
llama-server -m C:\m\t.gguf ^
  --model-draft C:\m\d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 ^
  --spec-draft-n-max 8 -c 4096
