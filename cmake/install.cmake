# `cmake --install build --prefix P` installs the libraries, the headers (the source tree's
# layout under P/include/booster, the generated checkpoint.pb.h beside them) and a package
# config, so another project writes find_package(booster REQUIRED) and links booster::booster
# (everything: Booster, the plugins, the Trainer and the layers below) or one layer
# (booster::core, booster::nn, booster::optim, booster::data, booster::interface,
# booster::booster_api, booster::trainer, booster::ddp, booster::zero, booster::pipeline, booster::shardformer,
# booster::galvatron, booster::plugins).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(BOOSTER_LAYERS booster_core booster_nn booster_optim booster_data booster_proto booster_interface booster_ddp booster_booster
                   booster_trainer booster_zero booster_pipeline booster_shardformer booster_galvatron booster_plugins)
set_target_properties(booster_core PROPERTIES EXPORT_NAME core)
set_target_properties(booster_nn PROPERTIES EXPORT_NAME nn)
set_target_properties(booster_optim PROPERTIES EXPORT_NAME optim)
set_target_properties(booster_data PROPERTIES EXPORT_NAME data)
set_target_properties(booster_proto PROPERTIES EXPORT_NAME proto)
set_target_properties(booster_interface PROPERTIES EXPORT_NAME interface)
set_target_properties(booster_booster PROPERTIES EXPORT_NAME booster_api)
set_target_properties(booster_trainer PROPERTIES EXPORT_NAME trainer)
set_target_properties(booster_galvatron PROPERTIES EXPORT_NAME galvatron)
set_target_properties(booster_ddp PROPERTIES EXPORT_NAME ddp)
set_target_properties(booster_zero PROPERTIES EXPORT_NAME zero)
set_target_properties(booster_pipeline PROPERTIES EXPORT_NAME pipeline)
set_target_properties(booster_shardformer PROPERTIES EXPORT_NAME shardformer)
set_target_properties(booster_plugins PROPERTIES EXPORT_NAME plugins)
add_library(booster_all INTERFACE)
target_link_libraries(booster_all INTERFACE booster_plugins booster_trainer)
set_target_properties(booster_all PROPERTIES EXPORT_NAME booster)
install(TARGETS ${BOOSTER_LAYERS} booster_all EXPORT boosterTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(dir core nn optim data booster ddp zero pipeline shardformer galvatron plugins)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/booster
          FILES_MATCHING PATTERN "*.h")
endforeach()
install(FILES ${CMAKE_BINARY_DIR}/proto/checkpoint.pb.h ${CMAKE_BINARY_DIR}/proto/tensorboard.pb.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/booster/proto)
install(EXPORT boosterTargets NAMESPACE booster:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/booster)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/boosterConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/boosterConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/booster)
install(FILES ${CMAKE_BINARY_DIR}/boosterConfig.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/booster)
