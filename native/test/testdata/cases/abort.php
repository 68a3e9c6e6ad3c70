<?php
echo json_encode([connection_aborted(), connection_status(), ignore_user_abort(true)]);
