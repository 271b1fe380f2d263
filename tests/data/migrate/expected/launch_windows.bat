@echo off
REM Reconstructed (issue 27 shape): a Windows launcher whose draft path is a variable.
set DRAFT=D:\models\qwen2.5-0.5b-instruct-q8_0.gguf
llama-server.exe -m D:\models\qwen2.5-14b-instruct-q4_k_m.gguf ^
  -md %DRAFT% --spec-type draft-simple --spec-draft-p-min 0.75 ^
  --spec-draft-n-max 16 ^
  --spec-draft-n-min 1 ^
  -ngl 99 -ngld 99
