<?php
// A child PHP spawns must not hold the server's pipes, fds 3 and 4.
echo trim((string) shell_exec('for f in 3 4; do [ -e /proc/$$/fd/$f ] && echo "fd $f open"; done; echo checked'));
