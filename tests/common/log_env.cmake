# The logger's settings from the environment (LH_LOG_LEVEL, LH_LOG_TIME) and
# its ISO 8601 timestamps (test_log_env).
lh_add_test(test_log_env SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_log_env.c LIBS lh_common TIMEOUT 30)
