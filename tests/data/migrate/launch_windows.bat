@echo off
REM Reconstructed (issue 27 shape): a Windows launcher whose draft path is a variable.
set DRAFT=D:\models\qwen2.5-0.5b-instruct-q8_0.gguf
llama-server.exe -m D:\models\qwen2.5-14b-instruct-q4_k_m.gguf ^
  -md %DRAFT% ^
  --draft-max 16 ^
  --draft-min 1 ^
  -ngl 99 -ngld 99
