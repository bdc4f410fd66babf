# The test of examples/executor, whose output varies in its numbers: runs
# PROG with ARGS (a list; under LAUNCHER, if set) and checks what the
# numbers must say. Called from the pool, count_primes leaves the loop
# free, so the ticker ticks at least once (the phase must last well over
# one 50 ms tick: ARGS picks an N that does); called on the loop it stalls
# the loop, and the ticker ticks exactly 0 times. Both phases must find
# PRIMES primes.
execute_process(COMMAND ${LAUNCHER} ${PROG} ${ARGS} OUTPUT_VARIABLE out
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROG} exited with ${rc}; its output:\n${out}")
endif()
set(num "([0-9]+)")
foreach(where "in the pool" "on the loop")
  if(NOT out MATCHES
     "${where}: ${num} ms, primes below ${num}: ${num}, ticker ticked ${num} times?\n")
    message(FATAL_ERROR "no line for \"${where}\" in:\n${out}")
  endif()
  set(ms ${CMAKE_MATCH_1})
  set(primes ${CMAKE_MATCH_3})
  set(ticked ${CMAKE_MATCH_4})
  if(NOT primes EQUAL PRIMES)
    message(FATAL_ERROR "${where}: ${primes} primes, not ${PRIMES}:\n${out}")
  endif()
  if(where STREQUAL "in the pool" AND ticked LESS 1)
    message(FATAL_ERROR "the loop did not tick while the pool counted "
                        "(${ms} ms):\n${out}")
  endif()
  if(where STREQUAL "on the loop" AND NOT ticked EQUAL 0)
    message(FATAL_ERROR "the ticker ticked while the loop was stalled:\n${out}")
  endif()
endforeach()
message(STATUS "${out}")
