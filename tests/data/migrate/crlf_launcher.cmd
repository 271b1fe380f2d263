@echo off
REM Reconstructed (issue 27 shape): CRLF line ends, ^ continuations.
llama-server -m C:\m\t.gguf ^
  --model-draft C:\m\d.gguf ^
  --draft-max 8 --ctx-size-draft 4096 -c 4096
