<?php

declare(strict_types=1);

namespace App\Providers;

use Illuminate\Support\Facades\DB;
use Illuminate\Support\Facades\Hash;
use Illuminate\Support\ServiceProvider;

final class AppServiceProvider extends ServiceProvider
{
    /** Creates the SQLite schema and two users on first start (what migrations and seeders do). */
    public function boot(): void
    {
        $file = config('database.connections.sqlite.database');
        if (!is_file($file)) {
            touch($file);
        }
        DB::statement('CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, '
            . 'email TEXT NOT NULL UNIQUE, password TEXT NOT NULL, remember_token TEXT, created_at TEXT, updated_at TEXT)');
        DB::statement('CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY AUTOINCREMENT, user_id INTEGER, '
            . 'text TEXT NOT NULL, created_at TEXT, updated_at TEXT)');
        if (DB::table('users')->count() === 0) {
            foreach (['alice' => 'Alice', 'bob' => 'Bob', 'carol' => 'Carol'] as $login => $name) {
                DB::statement('INSERT OR IGNORE INTO users (name, email, password) VALUES (?, ?, ?)',
                    [$name, $login . '@example.com', Hash::make('secret')]);
            }
        }
    }
}
