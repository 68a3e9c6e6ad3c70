<?php
// Installs WordPress into the site given as the first argument (its wp-config.php names the
// database), as the web installer's last step would: wp_install() with a title, an admin user
// and the default content (the "Hello world!" post). Run by bench/cmd/bench with the PHP CLI
// before the servers start. Prints the front page's post title on success.
if ($argc < 2) {
    fwrite(STDERR, "usage: php install.php SITE_DIR\n");
    exit(2);
}
$_SERVER['HTTP_HOST'] = '127.0.0.1';
$_SERVER['REQUEST_URI'] = '/wp-admin/install.php';
$_SERVER['SERVER_PROTOCOL'] = 'HTTP/1.1';
define('WP_INSTALLING', true);
require $argv[1] . '/wp-load.php';
require_once ABSPATH . 'wp-admin/includes/upgrade.php';
if (is_blog_installed()) {
    echo "already installed\n";
    exit(0);
}
$result = wp_install('Peregrine bench', 'admin', 'admin@example.com', true, '', 'bench-password-not-secret');
if (empty($result['user_id'])) {
    fwrite(STDERR, "wp_install failed\n");
    exit(1);
}
// Pretty permalinks, as most sites have them (the installer's own check needs a web server).
update_option('permalink_structure', '/%year%/%monthnum%/%day%/%postname%/');
echo get_post(1)->post_title, "\n";
