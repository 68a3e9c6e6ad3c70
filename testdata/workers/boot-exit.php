<?php
// Dies during its bootstrap, after printing why.
fwrite(STDERR, "bootstrap failed: database unreachable\n");
exit(1);
