/*
 * Prints the offsets symbolize/python's layout table holds, taken with
 * offsetof() from the internal headers of the CPython it is compiled
 * against (cc -I<prefix>/include/python3.X testdata/offsets.c). One
 * "name value" per line; names are the layout fields.
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030b0000
#include "internal/pycore_frame.h"
#else
#include "frameobject.h"
#endif
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"

#define P(name, expr) printf("%s %zu\n", name, (size_t)(expr))

int main(void)
{
	P("minor", PY_MINOR_VERSION);
	P("runtimeInterpHead", offsetof(_PyRuntimeState, interpreters.head));
#if PY_VERSION_HEX >= 0x030b0000
	P("interpThreadsHead", offsetof(PyInterpreterState, threads.head));
	P("tstateNativeTID", offsetof(PyThreadState, native_thread_id));
#else
	P("interpThreadsHead", offsetof(PyInterpreterState, tstate_head));
#endif
	P("tstateNext", offsetof(PyThreadState, next));
	P("tstateInterp", offsetof(PyThreadState, interp));
	P("tstateThreadID", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX >= 0x030d0000
	P("tstateFrame", offsetof(PyThreadState, current_frame));
#elif PY_VERSION_HEX >= 0x030b0000
	P("tstateFrame", offsetof(PyThreadState, cframe));
	P("cframeCurrent", offsetof(_PyCFrame, current_frame));
#else
	P("tstateFrame", offsetof(PyThreadState, frame));
#endif
#if PY_VERSION_HEX >= 0x030b0000
	P("frameBack", offsetof(_PyInterpreterFrame, previous));
#if PY_VERSION_HEX >= 0x030d0000
	P("frameCode", offsetof(_PyInterpreterFrame, f_executable));
	P("frameInstr", offsetof(_PyInterpreterFrame, instr_ptr));
#else
	P("frameCode", offsetof(_PyInterpreterFrame, f_code));
	P("frameInstr", offsetof(_PyInterpreterFrame, prev_instr));
#endif
#if PY_VERSION_HEX >= 0x030c0000
	P("frameOwner", offsetof(_PyInterpreterFrame, owner));
#else
	P("frameIsEntry", offsetof(_PyInterpreterFrame, is_entry));
#endif
	P("codeQualname", offsetof(PyCodeObject, co_qualname));
	P("codeAdaptive", offsetof(PyCodeObject, co_code_adaptive));
	P("codeLineTable", offsetof(PyCodeObject, co_linetable));
#else
	P("frameBack", offsetof(PyFrameObject, f_back));
	P("frameCode", offsetof(PyFrameObject, f_code));
	P("frameInstr", offsetof(PyFrameObject, f_lasti));
#if PY_VERSION_HEX >= 0x030a0000
	P("codeLineTable", offsetof(PyCodeObject, co_linetable));
#else
	P("codeLineTable", offsetof(PyCodeObject, co_lnotab));
#endif
#endif
	P("codeFilename", offsetof(PyCodeObject, co_filename));
	P("codeName", offsetof(PyCodeObject, co_name));
	P("codeFirstLineno", offsetof(PyCodeObject, co_firstlineno));
	P("asciiSize", sizeof(PyASCIIObject));
	P("compactSize", sizeof(PyCompactUnicodeObject));
	P("obType", offsetof(PyObject, ob_type));
	P("varSize", offsetof(PyVarObject, ob_size));
	P("bytesData", offsetof(PyBytesObject, ob_sval));
	P("strLength", offsetof(PyASCIIObject, length));
	P("strState", offsetof(PyASCIIObject, state));
	P("unicodeData", offsetof(PyUnicodeObject, data));
	return 0;
}
