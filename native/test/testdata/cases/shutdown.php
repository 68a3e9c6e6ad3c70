<?php
register_shutdown_function(function (): void {
    echo '+shutdown';
});
echo 'main';
