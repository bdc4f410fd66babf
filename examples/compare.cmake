# Runs PROG with ARGS (a list; under LAUNCHER, if set) and fails unless its standard output is
# exactly the file EXPECTED.
execute_process(COMMAND ${LAUNCHER} ${PROG} ${ARGS} OUTPUT_VARIABLE out
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROG} exited with ${rc}")
endif()
file(READ ${EXPECTED} want)
if(NOT out STREQUAL want)
  file(WRITE ${PROG}.out "${out}")
  message(FATAL_ERROR "output differs from ${EXPECTED}; got ${PROG}.out")
endif()
