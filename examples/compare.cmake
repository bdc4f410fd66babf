# Runs PROG with ARGS (a list; under LAUNCHER, if set) and fails unless its
# standard output is exactly the file EXPECTED. With SPLIT (a list of line
# prefixes), the lines of each prefix are compared in order, but not how
# lines of different prefixes interleave (threads print in the kernel's
# order); every line must start with one of them.
execute_process(COMMAND ${LAUNCHER} ${PROG} ${ARGS} OUTPUT_VARIABLE out
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROG} exited with ${rc}")
endif()
file(READ ${EXPECTED} want)
set(got "${out}")
if(SPLIT)
  # Each prefix's lines, in order, one prefix after the other.
  string(REGEX MATCHALL "[^\n]*\n|[^\n]+$" lines "${out}")
  set(got "")
  set(kept 0)
  foreach(prefix ${SPLIT})
    foreach(line ${lines})
      string(FIND "${line}" "${prefix}" at)
      if(at EQUAL 0)
        string(APPEND got "${line}")
        math(EXPR kept "${kept} + 1")
      endif()
    endforeach()
  endforeach()
  list(LENGTH lines nlines)
  if(NOT kept EQUAL nlines)
    set(got "${out}") # a line of no prefix: compare as it is, to fail
  endif()
endif()
if(NOT got STREQUAL want)
  file(WRITE ${PROG}.out "${out}")
  message(FATAL_ERROR "output differs from ${EXPECTED}; got ${PROG}.out")
endif()
