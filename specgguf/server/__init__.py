"""`specgguf serve`: an OpenAI- and llama-server-compatible HTTP server over the Generator.

protocol (request validation, response shapes: pure), scheduler (slots, queue, the one
thread that calls llama.cpp), app (Starlette routes, SSE), page (the chat page at GET /),
runner (uvicorn, signals, start and stop), connections (how many may be open at once).
"""
