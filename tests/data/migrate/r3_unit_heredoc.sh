#!/bin/bash
# Synthetic (round 3 shapes): a systemd unit written by a heredoc.
cat > /etc/systemd/system/llama.service <<UNIT
[Unit]
Description=llama server

[Service]
ExecStart=/usr/local/bin/llama-server -m /models/t.gguf -md /models/d.gguf --draft-max 12 --port 8080
Restart=always
UNIT
systemctl daemon-reload
