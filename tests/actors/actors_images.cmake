# actors: odd image sizes padded, too many patches end one episode (test_actors_images).
lh_add_test(test_actors_images SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_actors_images.c
  LIBS lh_actors lh_learner TIMEOUT 120)
