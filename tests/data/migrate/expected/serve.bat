@echo off
REM Shape of public Windows launchers (code search: FadelMamar/video-qa
REM launch_vlm_endpoint.bat, Adi3000/cerbinou llamacpp/llama3.bat) with a draft. Reconstructed.
set LLAMA_HOME=C:\llama
%LLAMA_HOME%\llama-server.exe --host 0.0.0.0 ^
     --model C:\models\main.gguf ^
     --model-draft C:\models\draft.gguf --spec-type draft-simple --spec-draft-p-min 0.75 ^
     --spec-draft-n-max 16 --spec-draft-n-min 4 ^
     --port 8003
pause
