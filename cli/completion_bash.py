"""--completion-bash: a bash completion script for specgguf, made from its commands' options
(the flag table's rows and each command's own), printed to be sourced:
`source <(specgguf run --completion-bash)`. After `specgguf`, a command name is completed;
after a command, its flags; after a flag naming a file, the files of its kind."""

from __future__ import annotations

#: the flags whose value is a file of a kind, and the pattern that kind's names match
FILE_KINDS = {
    "-m --model -md --model-draft --spec-draft-model --lora --control-vector": "*.gguf",
    "--grammar-file": "*.gbnf",
    "--chat-template-file": "*.jinja",
    "-f --file -sysf --system-prompt-file --api-key-file --log-file": "*",
}


def completion_script(group) -> str:
    """The script for the click group `group` (specgguf's commands)."""
    commands = sorted(group.commands)
    lines = ["_specgguf_completions() {",
             "    local cur prev cmd opts",
             "    COMPREPLY=()",
             '    cur="${COMP_WORDS[COMP_CWORD]}"',
             '    prev="${COMP_WORDS[COMP_CWORD-1]}"',
             '    cmd="${COMP_WORDS[1]}"',
             "    if [ \"$COMP_CWORD\" -eq 1 ]; then",
             f'        COMPREPLY=( $(compgen -W "{" ".join(commands)}" -- "$cur") )',
             "        return 0",
             "    fi",
             '    case "$prev" in']  # fmt: skip
    for flags, pattern in FILE_KINDS.items():
        exclude = "" if pattern == "*" else f" -X '!{pattern}'"
        lines += [f"        {'|'.join(flags.split())})",
                  f'            COMPREPLY=( $(compgen -f{exclude} -- "$cur") '
                  '$(compgen -d -- "$cur") )',
                  "            return 0", "            ;;"]  # fmt: skip
    lines += ["    esac", '    case "$cmd" in']
    for name in commands:
        params = group.commands[name].params
        words = sorted({o for p in params for o in (*p.opts, *p.secondary_opts)
                        if o.startswith("-")})  # fmt: skip
        lines += [f"        {name}) opts=\"{' '.join(words)}\" ;;"]
    lines += ['        *) opts="" ;;', "    esac",
              '    COMPREPLY=( $(compgen -W "${opts}" -- "$cur") )', "    return 0", "}", "",
              "complete -F _specgguf_completions specgguf", ""]  # fmt: skip
    return "\n".join(lines)
