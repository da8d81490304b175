"""Print the Python and every package version a virtual environment resolved: `make versions VENV=.venv`.
.ci/run prints it, so a CI log says exactly what was tested."""
import subprocess
import sys
from pathlib import Path

venv = Path(sys.argv[1] if len(sys.argv) > 1 else ".venv")
PROBE = ("import importlib.metadata as m, platform, sys; "
         "print(f'Python {platform.python_version()} on {platform.system()} {platform.machine()}'); "
         "print(', '.join(sorted((f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions()), key=str.lower)))")
# -I: isolated, so the working folder (a seq2onnx.egg-info a build left there) is not read as a second install
subprocess.run([str(venv / "bin" / "python"), "-I", "-c", PROBE], check=True)
