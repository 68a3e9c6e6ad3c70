<?php
register_shutdown_function(function () {
    echo 'shutdown after exception';
});
throw new RuntimeException('uncaught on purpose');
