# bash completion for trainq (installed as share/bash-completion/completions/trainq).
# Commands and options are read from `trainq --help` and `trainq COMMAND --help`,
# so the completion always matches the installed binary.

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

_trainq() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  local trainq=${COMP_WORDS[0]}
  local cmd="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in
      --db) ((i++)) ;;
      -*) ;;
      *) cmd=${COMP_WORDS[i]}; break ;;
    esac
  done
  local words
  if [[ -z $cmd ]]; then
    if [[ $cur == -* ]]; then
      words=$("$trainq" --help 2>/dev/null | _trainq_help_words OPTIONS)
      words+=" "$("$trainq" --help 2>/dev/null | _trainq_help_words Options)
    else
      words=$("$trainq" --help 2>/dev/null | _trainq_help_words SUBCOMMANDS)
      words+=" "$("$trainq" --help 2>/dev/null | _trainq_help_words Subcommands)
    fi
  elif [[ $cur == -* ]]; then
    words=$("$trainq" "$cmd" --help 2>/dev/null | _trainq_help_words OPTIONS)
    words+=" "$("$trainq" "$cmd" --help 2>/dev/null | _trainq_help_words Options)
  else
    # A file or directory (config files, repositories, output folders).
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    return 0
  fi
  mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
}
complete -o default -F _trainq trainq
