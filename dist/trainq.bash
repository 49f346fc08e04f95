# bash completion for trainq (installed as share/bash-completion/completions/trainq).
# Commands, subcommands and options are read from `trainq [COMMAND...] --help`,
# so the completion always matches the installed binary:
#   trainq <TAB>              the commands
#   trainq sweep <TAB>        sweep's subcommands (start, status, best, ...)
#   trainq sweep start --<TAB>  that subcommand's options
#   trainq help <TAB>         the commands again (`trainq help COMMAND`)
#   trainq submit <TAB>       files (a command without subcommands)

# The words of an "Options:" or "Subcommands:" section of a CLI11 help text.
_trainq_help_words() {
  local section=$1
  awk -v section="$section" '
    /^[A-Z][A-Za-z ]*:$/ { in_section = ($0 == section ":"); next }
    in_section && /^  [^ ]/ {
      sub(/^  /, "")
      n = split($0, parts, /[ ,]+/)
      # A command: its first word. An option: its names, up to its value
      # type or description ("-v,--verbose", "--db TEXT ...").
      for (i = 1; i <= n; i++) {
        if (section == "SUBCOMMANDS" || section == "Subcommands") { print parts[i]; break }
        if (parts[i] !~ /^--?[A-Za-z]/) break
        print parts[i]
      }
    }'
}

# The subcommands of `trainq WORDS...` ("" for a command that has none).
_trainq_subcommands() {
  local help
  help=$("$@" --help 2>/dev/null)
  printf '%s\n' "$help" | _trainq_help_words SUBCOMMANDS
  printf '%s\n' "$help" | _trainq_help_words Subcommands
}

_trainq() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  local trainq=${COMP_WORDS[0]}
  # The command path typed so far: each word a subcommand of the one before
  # (--db's value and options skipped; a word that is no subcommand ends it).
  local -a path=()
  local i subs word
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    case $word in
      --db) ((i++)) ;;
      -*) ;;
      *)
        subs=" "$(_trainq_subcommands "$trainq" "${path[@]}" | tr '\n' ' ')
        [[ $subs == *" $word "* ]] || break
        path+=("$word")
        ;;
    esac
  done
  # `trainq help COMMAND`: complete the commands after help, as after trainq.
  if [[ ${path[0]} == help ]]; then
    path=("${path[@]:1}")
    [[ $cur == -* ]] && return 0
    mapfile -t COMPREPLY < <(compgen -W "$(_trainq_subcommands "$trainq" "${path[@]}")" -- "$cur")
    return 0
  fi
  local words
  if [[ $cur == -* ]]; then
    local help
    help=$("$trainq" "${path[@]}" --help 2>/dev/null)
    words=$(printf '%s\n' "$help" | _trainq_help_words OPTIONS)
    words+=" "$(printf '%s\n' "$help" | _trainq_help_words Options)
  else
    words=$(_trainq_subcommands "$trainq" "${path[@]}")
    if [[ -z ${words//[[:space:]]/} ]]; then
      # A command without subcommands: a file or directory (config files,
      # repositories, output folders).
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
      return 0
    fi
  fi
  mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
}
complete -o default -F _trainq trainq
