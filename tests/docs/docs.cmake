# The documentation against the code. test_docs_config and test_docs_store:
# docs/configuration.md and the tables of docs/store.md are what `longhaul
# help config` and `longhaul help store` print now (cmake/doc_page.cmake);
# each fails when a config key or a column of the store has no doc (the
# binary refuses to print then) or when the page is stale (`cmake --build
# build --target docs` writes it again). test_docs_links: every link of
# README.md, ARCHITECTURE.md, RELIABILITY.md, envs/README.md and docs/*.md
# names a file of the repository and a heading of it
# (tests/docs/check_links.py).
foreach(topic_page config:configuration store:store)
  string(REPLACE ":" ";" pair ${topic_page})
  list(GET pair 0 topic)
  list(GET pair 1 page)
  add_test(NAME test_docs_${topic}
    COMMAND ${CMAKE_COMMAND} -DBIN=$<TARGET_FILE:longhaul> -DTOPIC=${topic}
            -DFILE=${CMAKE_SOURCE_DIR}/docs/${page}.md -DMODE=check -P ${CMAKE_SOURCE_DIR}/cmake/doc_page.cmake)
  set_tests_properties(test_docs_${topic} PROPERTIES LABELS docs TIMEOUT 60)
endforeach()
add_test(NAME test_docs_links COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/check_links.py ${CMAKE_SOURCE_DIR})
set_tests_properties(test_docs_links PROPERTIES LABELS docs TIMEOUT 60)
