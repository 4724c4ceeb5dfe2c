# Writes OUT, the man page longhaul(1), from the text of `longhaul --help`
# and of every command's --help (the same text the binary prints). Run by
# `cmake -P` at build time (cli/CMakeLists.txt) with BIN, VERSION and OUT.
execute_process(COMMAND ${BIN} --help OUTPUT_VARIABLE top RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "man_page.cmake: ${BIN} --help failed (${rc})")
endif()
# The commands: the indented first words of the top-level help's lines.
string(REGEX MATCHALL "\n  [a-z]+ " words "${top}")
set(commands "")
foreach(w ${words})
  string(STRIP "${w}" w)
  list(APPEND commands ${w})
endforeach()
list(REMOVE_DUPLICATES commands)
# roff: a backslash is \e; a line starting with . or ' is escaped.
function(roff text out)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REGEX REPLACE "\n([.'])" "\n\\\\&\\1" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
roff("${top}" top_roff)
set(page ".TH LONGHAUL 1 \"\" \"longhaul ${VERSION}\" \"User Commands\"
.SH NAME
longhaul \\- actor-learner reinforcement learning of a mixture-of-experts policy
.SH SYNOPSIS
.B longhaul
\\fICOMMAND\\fR [\\fIOPTIONS\\fR]
.SH DESCRIPTION
.nf
${top_roff}
.fi
")
foreach(c ${commands})
  execute_process(COMMAND ${BIN} ${c} --help OUTPUT_VARIABLE help RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND help)
    roff("${help}" help_roff)
    string(TOUPPER "${c}" C)
    string(APPEND page ".SH LONGHAUL ${C}\n.nf\n${help_roff}\n.fi\n")
  endif()
endforeach()
string(APPEND page ".SH EXIT STATUS\n0 ok, 1 runtime failure, 2 usage or configuration error.\n"
  ".SH SEE ALSO\nREADME.md, ARCHITECTURE.md and docs/ of the longhaul sources; longhaul help config and longhaul help store; pkg-config longhaul-env for plugins.\n")
file(WRITE ${OUT} "${page}")
