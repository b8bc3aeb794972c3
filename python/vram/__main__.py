"""python -m vram [info | site-dir | summary [DEVICE]]

info      the library's path, version, backend, devices and settings (default)
site-dir  the folder `vram run --allocator vram` puts first on PYTHONPATH
summary   the memory summary of DEVICE (default 0) in this process: only
          useful to check that the library loads and answers
"""

import json
import sys

import vram


def main(argv):
    cmd = argv[0] if argv else "info"
    if cmd == "site-dir" and len(argv) == 1:
        print(vram.site_dir())
    elif cmd == "info" and len(argv) <= 1:
        info = vram.info()
        info["library"] = vram.library_path()
        print(json.dumps(info, indent=2, sort_keys=True))
    elif cmd == "summary" and len(argv) <= 2:
        device = argv[1] if len(argv) == 2 else "0"
        if not device.isdigit():
            sys.stderr.write("vram: summary: DEVICE must be a device index such as 0, got %r\n" % device)
            return 2
        sys.stdout.write(vram.memory_summary(int(device)))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except vram.Error as e:
        sys.stderr.write("%s\n" % e)
        sys.exit(1)
