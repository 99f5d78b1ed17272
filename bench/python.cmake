# SPDX-License-Identifier: Apache-2.0
# py_bench_c: the C loops that bench/py_bench.py --inproc times on a
# MaruHandler's own libmaru handler (bench/run_python_bench.sh runs it).  A
# Python extension module built here, with the benchmarks, so that the
# installed package holds no benchmark code; at import it takes what it
# needs from the package's extension (the capsule of python/src/_maru.h).
# Built for the Python that dev.sh makes its venv from, /usr/bin/python3;
# -DPython3_EXECUTABLE=... for another.
if(EXISTS /usr/bin/python3)
	set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH
		"the Python that py_bench_c is built for")
endif()
find_package(Python3 COMPONENTS Interpreter Development.Module)
if(Python3_FOUND)
	Python3_add_library(py_bench_c MODULE WITH_SOABI
		${CMAKE_CURRENT_SOURCE_DIR}/py_bench_c.c)
	target_include_directories(py_bench_c PRIVATE
		${PROJECT_SOURCE_DIR}/python/src)
	target_link_libraries(py_bench_c PRIVATE maru)
else()
	message(WARNING "Python 3 headers not found: py_bench_c "
		"(bench/py_bench.py --inproc) is not built")
endif()
